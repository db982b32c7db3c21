#!/usr/bin/env bash
# verl 0.9.1 in a venv of its own for the tests that load the verl exports with verl's own
# MultiTurnSFTDataset, RLHFDataset and agent-loop code (tests/trainer/test_verl_export.py).
# verl pins transformers >=5.5.3,<5.11 (and so tokenizers <=0.23.0 and huggingface-hub <2);
# the project pins transformers 5.24. The venv holds only verl and what conflicts or is missing,
# installed --no-deps at fixed versions; a .pth line then puts the project's venv (torch, numpy,
# pandas, pyarrow, datasets, pydantic, ...) after its own site-packages, so torch is not
# installed twice. Usage: verl_venv.sh PROJECT_VENV [DIR]; prints DIR/bin/python.
set -euo pipefail
project=${1:?the project venv}
dir=${2:-$(cd "$(dirname "$0")/../.." && pwd)/.cache/venvs/verl}
pins=(verl==0.9.1 transformers==5.10.4 tokenizers==0.22.2 huggingface-hub==1.33.0
  tensordict==0.10.0 pyvers==0.1.0 ray==2.60.0 msgpack==1.2.4 omegaconf==2.4.0 hydra-core==1.3.8
  antlr4-python3-runtime==4.9.3 codetiming==1.4.0 cachetools==8.0.2)
want="${pins[*]} over $project"
if [ -f "$dir/.installed" ] && [ "$(cat "$dir/.installed")" = "$want" ]; then
  echo "$dir/bin/python"; exit 0
fi
rm -rf "$dir"
mkdir -p "$(dirname "$dir")"
"$project/bin/python" -m venv --without-pip "$dir"
site=$("$dir/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
under=$("$project/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# addsitedir (not a bare path line) so the project venv's own .pth files (its editable pomona)
# are read too
echo "import site; site.addsitedir('$under')" > "$site/zz-pomona-project-venv.pth"
# (this machine's pip config names local indexes that may not exist: hide those warnings only)
"$project/bin/python" -m pip --python "$dir/bin/python" install -q --no-deps --target "$site" \
  "${pins[@]}" 2> >(grep -v "is ignored: it is neither" >&2)
"$dir/bin/python" -c "import verl.utils.dataset.multiturn_sft_dataset, verl.experimental.agent_loop.agent_loop"
echo "$want" > "$dir/.installed"
echo "$dir/bin/python"

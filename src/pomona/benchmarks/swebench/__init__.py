"""SWE-bench 5.x: load instances, run agents at the base commit, and grade patches the official way.

    instances   the official row (and Pomona's optional fields), loading and selecting rows
    testbed     /testbed at the base commit in a sandbox, the agent's diff taken back out
    guard       what a patch changed in the verifier's tree, and which of it reaches into testing
    session     one verification in a fresh sandbox: swebench's run_instance, with the witness
    faults      when the environment, not the patch, failed
    grading     swebench's run_instance step by step in a fresh sandbox, its report.json
    reports     predictions files and swebench's run report
    scorer      SweTask and SweScorer: an instance as a Task
    datasets    every other source and row shape (hub names, SWE-Gym, SWE-smith, SWE-rebench)
    images      the images instances run on, found, pulled or built before grading
    task_sets   the local task sets shipped with Pomona, built from published archives
    evaluation  `pomona grade`: swebench's run_evaluation on Pomona's sandboxes

The names below are the package's public surface (they were one module's before).
"""

from pomona.benchmarks.swebench.faults import apply_fault, environment_fault
from pomona.benchmarks.swebench.grading import (
    Grade,
    claim_run_id,
    grade,
    log_dir_for,
    regrade,
    test_statuses,
)
from pomona.benchmarks.swebench.instances import (
    AGENT_TIMEOUT,
    BUNDLE,
    CHECKOUT,
    TASK_DIR_KEY,
    TEST_DEPENDENCIES,
    TESTBED,
    TOOLCHAINS,
    Prediction,
    SweInstance,
    base_ref,
    bundle_of,
    image_of,
    load_instances,
    model_name,
    normalize,
    patch_files,
    prediction,
    select,
    toolchains,
    user_of,
)
from pomona.benchmarks.swebench.reports import load_predictions, run_report, write_predictions
from pomona.benchmarks.swebench.scorer import SweScorer, SweTask, tasks, to_task
from pomona.benchmarks.swebench.session import PATCH_FILE
from pomona.benchmarks.swebench.testbed import (
    JUNK,
    NODE_LINK,
    apply_commands,
    extract_patch,
    prepare_testbed,
    sandbox_options,
)
from pomona.benchmarks.task import VerifierError

__all__ = [
    "AGENT_TIMEOUT",
    "BUNDLE",
    "CHECKOUT",
    "JUNK",
    "NODE_LINK",
    "PATCH_FILE",
    "TASK_DIR_KEY",
    "TESTBED",
    "TEST_DEPENDENCIES",
    "TOOLCHAINS",
    "Grade",
    "Prediction",
    "SweInstance",
    "SweScorer",
    "SweTask",
    "VerifierError",
    "apply_commands",
    "apply_fault",
    "base_ref",
    "bundle_of",
    "claim_run_id",
    "environment_fault",
    "extract_patch",
    "grade",
    "image_of",
    "load_instances",
    "load_predictions",
    "log_dir_for",
    "model_name",
    "normalize",
    "patch_files",
    "prediction",
    "prepare_testbed",
    "regrade",
    "run_report",
    "sandbox_options",
    "select",
    "tasks",
    "test_statuses",
    "to_task",
    "toolchains",
    "user_of",
    "write_predictions",
]

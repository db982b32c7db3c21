#!/bin/bash
set -e
cat > book.txt <<'TXT'
The river ran past the mill, and the mill wheel turned all night.
At dawn the miller walked to the river; the River was high.
"Milling is slow work," said the miller, "but the wheel never sleeps."
TXT
printf 'river\nmill\nwheel\nmiller\n' > queries.txt

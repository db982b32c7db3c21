#!/bin/bash
set -e
cat > inventory.csv <<'CSV'
sku,name,qty
A100,hex bolts,40
A200,lock nuts,3
B300,flat washers,12
C400,door hinges,0
CSV

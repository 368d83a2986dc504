#!/bin/sh
# embed.sh FILE... — writes an assembler file that embeds each dashboard file with .incbin
# and a table {path, data, size} named sparkd_assets, read by web/assets.cpp.
set -e
echo '    .section .rodata'
i=0
for f in "$@"; do
  echo "    .balign 16"
  echo "asset_data_$i:"
  echo "    .incbin \"$f\""
  echo "asset_end_$i:"
  echo "    .byte 0"
  echo "asset_name_$i:"
  echo "    .asciz \"${f#assets/}\""
  i=$((i + 1))
done
# The table holds addresses, which a position-independent binary relocates at load time:
# it lives in .data.rel.ro (read-only after relocation), not .rodata.
echo '    .section .data.rel.ro'
echo '    .balign 8'
echo '    .globl sparkd_assets'
echo 'sparkd_assets:'
j=0
while [ $j -lt $i ]; do
  echo "    .quad asset_name_$j, asset_data_$j, asset_end_$j - asset_data_$j"
  j=$((j + 1))
done
echo '    .quad 0, 0, 0'
echo '    .section .note.GNU-stack,"",@progbits'

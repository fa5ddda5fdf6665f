# Sourced by the shell tests that check images (tests/test_plot_rfa.sh, tests/test_plot_rfa_run.sh,
# tests/test_kla_scripts.sh, tests/test_bla_scripts.sh).
# is_png FILE [W H]: FILE is non-empty, starts with the PNG signature and an IHDR chunk, and is W x H pixels
is_png() {
    [ -s "$1" ] || return 1
    [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || return 1
    [ "$(head -c 16 "$1" | tail -c 4)" = IHDR ] || return 1
    [ $# -ge 3 ] || return 0
    local wh; wh=$(head -c 24 "$1" | tail -c 8 | od -An -tu1 | tr -s ' ' | sed 's/^ //')
    [ "$wh" = "$(printf '0 0 %d %d 0 0 %d %d' $(($2 >> 8)) $(($2 & 255)) $(($3 >> 8)) $(($3 & 255)))" ]
}

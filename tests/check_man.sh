#!/bin/sh
# check_man.sh - the C API is documented, once, and the manual's references
# lead somewhere.
#
# For every function that include/pinshm.h and include/pinshm_device.h
# declare (PINSHM_EXPORT):
#   - exactly one section-3 page of man/ declares it in its SYNOPSIS;
#   - that page lists it in its NAME line (which also names the .so link
#     that make install writes for it: man pinshm_send opens its page);
#   - that page describes it: a .B or .BR line that starts with it.
# Every name in a NAME line and every function in a SYNOPSIS of a
# section-3 page is declared in a header.  Every reference of a page of
# man/ to a pinshm page, NAME (N), names a page of man/ or, in section 3,
# a name of a NAME line.  No page of man/ has more than 1000 lines, and
# groff renders each without a warning (where groff is installed).
# Run by make check from the top build folder; $srcdir is the top source
# folder.
set -eu

srcdir=${srcdir:-.}
man=$srcdir/man
status=0
fail() {
    echo "FAIL: $*" >&2
    status=1
}

# The functions the headers declare.
funcs=$(sed -n 's/^PINSHM_EXPORT [^(]*[ *]\(pinshm_[a-z0-9_]*\)(.*/\1/p' \
    "$srcdir/include/pinshm.h" "$srcdir/include/pinshm_device.h" | sort -u)
nfuncs=$(echo "$funcs" | wc -w)
if [ "$nfuncs" -lt 50 ]; then
    fail "only $nfuncs functions found in the headers: the pattern no longer matches them"
fi

# A page's NAME line, as words; its SYNOPSIS's functions.
names_of() {
    sed -n '/^\.SH NAME/{n;s/ *\\-.*//;s/,/ /g;p;q;}' "$1"
}
synopsis_of() {
    sed -n '/^\.SH SYNOPSIS/,/^\.SH /p' "$1" |
        sed -n 's/^\.BI\{0,1\} .*[ *]\(pinshm_[a-z0-9_]*\)(.*/\1/p'
}

pages3=$(ls "$man"/*.3)
for f in $funcs; do
    found=
    for page in $pages3; do
        if synopsis_of "$page" | grep -qx "$f"; then
            found="$found $page"
        fi
    done
    set -- $found
    if [ $# -ne 1 ]; then
        fail "$f is in the SYNOPSIS of $# section-3 pages ($found), not one"
        continue
    fi
    page=$1
    if ! names_of "$page" | tr ' ' '\n' | grep -qx "$f"; then
        fail "$f is not in the NAME line of $page"
    fi
    if ! sed '/^\.SH SYNOPSIS/,/^\.SH /d' "$page" | grep -q "^\.BR\{0,1\} \\\\%$f ()"; then
        fail "$page declares $f but no paragraph describes it (.BR \\%$f ())"
    fi
done

# Nothing documented that the headers do not declare.
all_names=
for page in $pages3; do
    base=$(basename "$page" .3)
    for n in $(names_of "$page") $(synopsis_of "$page"); do
        case $n in
        "$base" | pinshm) continue ;;
        esac
        case $n in
        pinshm_*) ;;
        *) continue ;; # the Python page names Python things
        esac
        all_names="$all_names $n"
        if ! echo "$funcs" | grep -qx "$n"; then
            fail "$page documents $n, which no header declares"
        fi
    done
done

# References to pinshm pages: a file of man/, or a name of a NAME line.
for page in "$man"/*.[1-8]; do
    refs=$(sed 's/\\%//g; s/\\-/-/g' "$page" |
        grep -o 'pinshm[A-Za-z0-9_.-]* *([1-8])' | tr -d ' ' | sort -u) || true
    for r in $refs; do
        name=${r%(*}
        sec=${r#*(}
        sec=${sec%)}
        if [ -f "$man/$name.$sec" ]; then
            continue
        fi
        if [ "$sec" = 3 ] && echo "$all_names" | tr ' ' '\n' | grep -qx "$name"; then
            continue
        fi
        fail "$page refers to $name($sec), which no page of man/ documents"
    done
done

for page in "$man"/*.[1-8]; do
    lines=$(wc -l <"$page")
    if [ "$lines" -gt 1000 ]; then
        fail "$page has $lines lines, more than 1000"
    fi
    # Rendered as man(1) does at 80 columns, without a warning (where groff
    # is installed; a page that is only a .so link is rendered elsewhere).
    if command -v groff >/dev/null 2>&1 && ! head -n 1 "$page" | grep -q '^\.so '; then
        warnings=$(groff -t -man -Tutf8 -rLL=78n -ww -z "$page" 2>&1) || true
        if [ -n "$warnings" ]; then
            fail "$page: $warnings"
        fi
    fi
done

if [ $status -eq 0 ]; then
    echo "check_man: $nfuncs functions, each in one page; every reference found"
fi
exit $status

#!/usr/bin/env bash
# Writes baton(1), a manual page in roff, to standard output, from the `--help` of the given binary: the
# command list of `baton --help`, then every command's (and subcommand's) own `--help`, which the CLI kit
# generates from each command's option declarations. So the page never drifts from the options.
#
#   scripts/manpage.sh BATON_BINARY VERSION > baton.1
set -euo pipefail

baton=${1:?usage: scripts/manpage.sh BATON_BINARY VERSION}
version=${2:?usage: scripts/manpage.sh BATON_BINARY VERSION}
date=$(date -u -d "@${SOURCE_DATE_EPOCH:-$(date +%s)}" +%Y-%m-%d)

# Text for roff's no-fill mode: backslashes and hyphens escaped, a leading dot or quote made literal.
roff() {
    sed -e 's/\\/\\e/g' -e 's/-/\\-/g' -e "s/^\\([.']\\)/\\\\\\&\\1/"
}

# The command words listed under the heading (the line ending with ':' after the usage) of `baton WORDS --help`.
subcommands_of() {
    "$baton" "$@" --help | awk '
        /^[a-z]+:$/ { listing = 1; next }
        listing && /^  [a-z]/ { print $1; next }
        listing && /^$/ { exit }'
}

# A section for `baton WORDS`, then one for each of its subcommands.
section() {
    local words=("$@") usage
    usage=$("$baton" "${words[@]}" --help)
    printf '.SS "baton %s"\n.nf\n' "${words[*]}"
    printf '%s\n' "$usage" | roff
    printf '.fi\n'
    if printf '%s\n' "$usage" | head -n 1 | grep -q '<'; then
        local sub
        for sub in $(subcommands_of "${words[@]}"); do section "${words[@]}" "$sub"; done
    fi
}

cat <<EOF
.TH BATON 1 "$date" "baton $version" "User Commands"
.SH NAME
baton \\- carry Sign in with Apple users across an app transfer between Apple developer teams
.SH SYNOPSIS
.B baton
.I command
.RI [ options ]
.br
.B baton
.I command
.B \\-\\-help
.SH DESCRIPTION
Baton verifies Sign in with Apple identity tokens, rewrites each user's record from the sending team's
identifier to the receiving team's on their first sign-in after an app transfer (exactly once), exchanges
transfer identifiers in bulk for users who do not sign in within Apple's 60-day window, answers credential
state for web and Android clients, reports progress, and emulates appleid.apple.com for rehearsals.
.PP
Each command below is shown as its
.B \\-\\-help
prints it. Configuration is one JSON file
.RB ( \\-\\-config ,
default
.IR baton.json )
whose keys can each be overridden by a
.B BATON_*
environment variable named after the key's path; see
.IR /usr/share/doc/baton/configuration.md .
.SH COMMANDS
.nf
EOF
"$baton" --help | awk '/^commands:$/ { listing = 1; next } listing && /^$/ { exit } listing' | roff
printf '.fi\n'
for command in $(subcommands_of); do section "$command"; done
cat <<'EOF'
.SH EXIT STATUS
0 on success, 1 for rejected input or a failed run, 2 for a usage or configuration error (one line on
standard error, with a hint).
.SH FILES
.TP
.I /etc/baton/baton.json
the configuration of the
.B baton.service
unit.
.TP
.I /etc/baton/baton.env
.B BATON_*
variables for the unit (root:baton, mode 640).
.TP
.I /etc/baton/keys/
the teams'
.I .p8
keys and the admin and service tokens: owner baton, mode 600 (Baton refuses files others can read).
.TP
.I /usr/share/baton/prometheus/baton.rules.yml
Prometheus alerting rules over
.BR /metrics .
.SH SEE ALSO
.BR systemctl (1),
.BR journalctl (1);
the runbook, configuration reference and HTTP API in
.IR /usr/share/doc/baton/ .
EOF

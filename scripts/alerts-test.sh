#!/usr/bin/env bash
# Checks the Prometheus alerting rules in alerts/: `promtool check rules`, `promtool test rules` on
# alerts/baton.rules.test.yml, and, given a scrape of a live `baton serve`'s /metrics, that every Baton series the
# rules and their tests name is one the service really exposes (and every label value a rule matches exactly,
# such as route="signin", appears on it). The bulk jobs' series (baton_job_*) come from a --metrics-file of
# `baton exchange` or `baton transfer-ids`: give it as a further --scrape. scripts/install-test.sh scrapes the
# packaged service and calls this.
#
#   scripts/alerts-test.sh [--scrape METRICS.txt]...
#
# promtool is Debian's (package prometheus): used from PATH when there, else taken out of the package
# (apt-get download, no service installed or started) into .build/tools/.
set -euo pipefail
cd "$(dirname "$0")/.."

scrapes=()
while [ $# -gt 0 ]; do
    case $1 in
        --scrape) scrapes+=("${2:?--scrape needs a file}"); shift 2 ;;
        *) echo "usage: scripts/alerts-test.sh [--scrape METRICS.txt]..." >&2; exit 2 ;;
    esac
done

promtool=$(command -v promtool || true)
if [ -z "$promtool" ]; then
    promtool=$PWD/.build/tools/promtool
    if [ ! -x "$promtool" ]; then
        echo "alerts-test: fetching promtool from Debian's prometheus package" >&2
        download=$(mktemp -d /tmp/baton-promtool.XXXXXX)
        trap 'rm -rf "$download"' EXIT
        (cd "$download" && apt-get download prometheus >/dev/null 2>&1) \
            || { apt-get update -qq && (cd "$download" && apt-get download prometheus >/dev/null); }
        mkdir -p .build/tools
        dpkg-deb --fsys-tarfile "$download"/prometheus_*.deb | tar -x -O ./usr/bin/promtool >"$promtool"
        chmod 0755 "$promtool"
    fi
fi

"$promtool" check rules alerts/baton.rules.yml
(cd alerts && "$promtool" test rules baton.rules.test.yml)

if [ ${#scrapes[@]} -gt 0 ]; then
    python3 - alerts/baton.rules.yml alerts/baton.rules.test.yml "${scrapes[@]}" <<'EOF'
import re, sys

rules, tests, scrapes = open(sys.argv[1]).read(), open(sys.argv[2]).read(), sys.argv[3:]
families, samples = set(), {}  # samples: name -> list of label dicts, over every scrape
for line in (line for scrape in scrapes for line in open(scrape)):
    line = line.strip()
    if line.startswith("# TYPE "):
        families.add(line.split()[2])
    elif line and not line.startswith("#"):
        match = re.match(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s', line)
        if match:
            labels = dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', match.group(3) or ""))
            samples.setdefault(match.group(1), []).append(labels)

problems = []
def known(name):
    return name in samples or name in families or re.sub(r'_(bucket|sum|count)$', '', name) in families

# Comments are left out: they may name series that do not exist (alerts/README.md's list of missing ones).
def code(text):
    return "\n".join(line.split("#")[0] if line.lstrip().startswith("#") else line for line in text.splitlines())

uses = 0
for source, text in (("rules", code(rules)), ("tests", code(tests))):
    for match in re.finditer(r'\b(baton_[a-z0-9_]+)(\{([^}]*)\})?', text):
        name, matchers = match.group(1), match.group(3) or ""
        uses += 1
        if not known(name):
            problems.append(f"{source}: {name} is in none of the scrapes (baton serve's /metrics, a job's --metrics-file)")
            continue
        names_seen = {key for labels in samples.get(name, []) for key in labels}
        for label, operator, value in re.findall(r'([a-z_]+)\s*(=~|!=|!~|=)\s*"([^"]*)"', matchers):
            if label in ("job", "instance"):
                continue  # added by Prometheus
            if label not in names_seen:
                problems.append(f"{source}: {name} has no label {label} in the scrapes")
            elif source == "rules" and operator == "=" and not any(labels.get(label) == value for labels in samples[name]):
                problems.append(f'rules: no {name} sample with {label}="{value}" in the scrapes')

for problem in problems:
    print("alerts-test: " + problem, file=sys.stderr)
if problems:
    sys.exit(1)
print(f"alerts-test: the {uses} uses of Baton series in the rules and their tests all match the live scrapes")
EOF
fi

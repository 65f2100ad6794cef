# Sourced by scripts/footprint.sh and scripts/latency.sh (from the repository's root, with $users and $binary set):
# a scratch PostgreSQL cluster (scripts/scale-setup.sh: $dir, $url, $work) restarted with full_page_writes on, as a
# production server runs, the emulator (`baton emulator --port 0`, its address in $emulator), a sending and a
# receiving team, an app of $users users with private relay emails, the app's transfer initiated and accepted, the
# application's table public.users holding those users under the sender's subjects, a configuration ($config)
# with both teams' keys, and `baton db migrate` applied. The emulator is stopped on exit.
. scripts/scale-setup.sh
pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
scripts/pg.sh stop "$dir"
owner=(); [ "$(id -u)" -eq 0 ] && owner=(runuser -u postgres --)
"${owner[@]}" "$pgbin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-k $dir -p $(cat "$dir/port") -c listen_addresses= -c fsync=off -c synchronous_commit=off -c full_page_writes=on -c max_connections=300" \
    start >/dev/null
. scripts/lib.sh
"$binary" emulator --port 0 --log-level warning >"$work/emulator.log" 2>&1 &
emulator_pid=$!
trap 'kill $emulator_pid 2>/dev/null; scripts/pg.sh destroy "$dir"; rm -rf "$work"' EXIT
emulator=$(listening_address "$work/emulator.log" $emulator_pid)
emulator() { curl -sf -X "$1" -H 'Content-Type: application/json' ${3:+-d "$3"} "http://$emulator$2"; }
sql() { psql -X -q -v ON_ERROR_STOP=1 -d "$url" "$@"; }

client_id=com.example.app
emulator POST /emulator/teams '{}' >"$work/sender.json"
emulator POST /emulator/teams '{}' >"$work/recipient.json"
emulator POST /emulator/apps "$(jq -nc --arg c $client_id --arg t "$(jq -r .team_id "$work/sender.json")" '{client_id: $c, team_id: $t}')" >/dev/null
emulator POST /emulator/users "$(jq -nc --arg c $client_id --argjson n "$users" '{client_id: $c, count: $n, private_email: true}')" >"$work/users.json"
emulator POST /emulator/transfers "$(jq -nc --arg c $client_id --arg t "$(jq -r .team_id "$work/recipient.json")" '{client_id: $c, to_team_id: $t}')" >/dev/null
accepted=$(emulator POST /emulator/transfers/accept "$(jq -nc --arg c $client_id '{client_id: $c}')" | jq -r .accepted_at)
sql -c 'CREATE TABLE public.users (id bigserial PRIMARY KEY, apple_sub text UNIQUE, email text UNIQUE, created_at timestamptz NOT NULL DEFAULT now())'
jq -r '.users[] | [.user_identifier, .email] | @csv' "$work/users.json" | sql -c '\copy public.users (apple_sub, email) FROM STDIN WITH (FORMAT csv)'
sql -c 'VACUUM ANALYZE public.users'
( umask 077; jq -r .private_key_pem "$work/sender.json" >"$work/sender.p8"; jq -r .private_key_pem "$work/recipient.json" >"$work/recipient.p8" )
jq -n --arg url "$url" --arg apple "http://$emulator" --arg at "$accepted" --arg c $client_id \
      --arg w "$work" --slurpfile s "$work/sender.json" --slurpfile r "$work/recipient.json" '
  {database: {url: $url},
   apple: {base_url: $apple, keys_url: ($apple + "/auth/keys"), client_ids: [$c],
           transfer: {client_id: $c, accepted_at: $at,
                      sender: {team_id: $s[0].team_id, key_id: $s[0].key_id, private_key_path: ($w + "/sender.p8")},
                      recipient: {team_id: $r[0].team_id, key_id: $r[0].key_id, private_key_path: ($w + "/recipient.p8")}}},
   legacy: {table: "public.users", key_column: "id", subject_column: "apple_sub", email_column: "email", where: null}}' >"$work/baton.json"
config=(--config "$work/baton.json")
"$binary" db migrate --database-url "$url" >/dev/null

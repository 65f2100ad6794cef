// The Postgres module: see docs and design.md.

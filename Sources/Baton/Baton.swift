// The Baton module: see docs and design.md.

// The JOSE module: see docs and design.md.

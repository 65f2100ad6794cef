// The BatonService module: see docs and design.md.

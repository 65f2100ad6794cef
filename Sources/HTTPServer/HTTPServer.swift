// The HTTPServer module: see docs and design.md.

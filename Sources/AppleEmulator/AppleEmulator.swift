// The AppleEmulator module: see docs and design.md.

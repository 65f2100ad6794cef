// The AppleSignIn module: see docs and design.md.

// AppleEmulatorTests

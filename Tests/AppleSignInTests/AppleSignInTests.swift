// AppleSignInTests

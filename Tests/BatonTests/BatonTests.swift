// BatonTests

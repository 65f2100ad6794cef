// BatonServiceTests

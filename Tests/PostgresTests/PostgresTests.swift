// PostgresTests

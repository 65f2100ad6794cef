// JOSETests

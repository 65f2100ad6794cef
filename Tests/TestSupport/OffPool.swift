// Tests run blocking work (a child process, a pipe read) through the package's one `offPool`, so Swift's
// cooperative pool, which in-process servers of other suites need, never blocks: every test target that
// imports TestSupport sees BatonConcurrency's.
@_exported import BatonConcurrency

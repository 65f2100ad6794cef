import FuzzSupport

/// libFuzzer entry point: one input for the JSON reader (see ``JSONHarness``).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzJSON(_ data: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    writeSeedsIfAsked { JSONHarness.seeds }
    JSONHarness.run(UnsafeRawBufferPointer(start: data, count: count))
    return 0
}

import BatonPostgres
import Testing

@Suite("PostgresError's one classification")
struct PostgresErrorTests {
    @Test("each code has its kind, and retrying and waiting follow from the kind", arguments: [
        (PostgresError.Code.connectionFailure, PostgresError.Kind.unreachable, true, true),
        (.serverShutdown, .unreachable, true, true),
        (.readOnly, .unreachable, true, true),
        (.poolTimeout, .saturated, true, true),
        (.serializationFailure, .contention, true, false),
        (.deadlockDetected, .contention, true, false),
        (.resourceUnavailable, .overloaded, false, false),
        (.queryCanceled, .overloaded, false, false),
        (.poolClosed, .closed, false, false),
        (.uniqueViolation, .refused, false, false),
        (.undefinedObject, .refused, false, false),
        (.server, .refused, false, false),
        (.decoding, .refused, false, false),
        (.invalidConfiguration, .refused, false, false),
        (.invalidParameter, .refused, false, false),
    ])
    func classification(code: PostgresError.Code, kind: PostgresError.Kind, transient: Bool, unavailable: Bool) {
        let error = PostgresError(code, reason: "test")
        #expect(error.kind == kind)
        #expect(error.isTransient == transient)
        #expect(error.isUnavailable == unavailable)
    }
}

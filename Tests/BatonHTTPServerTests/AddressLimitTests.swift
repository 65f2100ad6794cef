import Foundation
import Synchronization
import Testing
@testable import BatonHTTPServer

@Suite("Connections per address")
struct AddressLimitTests {
    let start = ContinuousClock.now
    let here = ClientAddress(high: 0, low: 0xffff_7f00_0001), there = ClientAddress(high: 0, low: 0xffff_7f00_0002)
    let wait = Duration.milliseconds(100)

    /// A limit of 2 per address with connections 1 and 2 of `here` counted, 3 and 4 waiting since `start`.
    func full() -> AddressLimit {
        var limit = AddressLimit(limit: 2, wait: wait)
        for id: UInt in 1...4 { _ = limit.opened(id, from: here, at: start) }
        return limit
    }

    @Test("within the limit counted; over it waiting, as many at once as the limit; past those dropped; another address apart")
    func admissions() {
        var limit = AddressLimit(limit: 2, wait: wait)
        #expect((1...5).map { limit.opened($0, from: here, at: start) } == [.counted, .counted, .waiting, .waiting, .dropped])
        #expect(limit.opened(6, from: there, at: start) == .counted)
        #expect(limit.requestRead(1, from: here, at: start) == .serve)
        #expect(limit.requestRead(3, from: here, at: start) == .wait(until: start + wait))
    }

    @Test("a counted connection's close hands its slot to the oldest waiting one, served when its request is read")
    func closeHandsSlotOn() {
        var limit = full()
        #expect(limit.closed(1, from: here) == nil)
        #expect(limit.requestRead(3, from: here, at: start) == .serve)
        #expect(limit.requestRead(4, from: here, at: start) == .wait(until: start + wait))
        // 3 holds the slot now: a fifth waits, and a close gives the next slot to 4, not to it.
        #expect(limit.opened(5, from: here, at: start) == .waiting)
        #expect(limit.closed(3, from: here) == nil)
        #expect(limit.requestRead(4, from: here, at: start) == .serve)
        #expect(limit.requestRead(5, from: here, at: start) == .wait(until: start + wait))
    }

    @Test("a connection suspended waiting is resumed by the close that frees a slot, and then served; parking after the slot came is refused")
    func parkedResumedByClose() {
        var limit = full()
        let resumed = Mutex(0)
        #expect(limit.park(3, from: here) { resumed.withLock { $0 += 1 } })
        limit.closed(2, from: here)?()
        #expect(resumed.withLock { $0 } == 1)
        #expect(limit.requestRead(3, from: here, at: start) == .serve)
        // 4 gets the slot of 1 before it parks: it is resumed by the caller instead.
        #expect(limit.closed(1, from: here) == nil)
        #expect(!limit.park(4, from: here) {})
        #expect(limit.requestRead(4, from: here, at: start) == .serve)
    }

    @Test("a connection still waiting when its request is read after the wait is refused; refused ones count among those over the limit until they close")
    func refusedAfterWait() {
        var limit = full()
        #expect(limit.requestRead(3, from: here, at: start + wait) == .refuse)
        #expect(limit.requestRead(3, from: here, at: start + wait) == .refuse)
        #expect(limit.opened(5, from: here, at: start) == .dropped)
        // Its close frees its place among those over the limit, not a slot.
        #expect(limit.closed(3, from: here) == nil)
        #expect(limit.opened(6, from: here, at: start) == .waiting)
        #expect(limit.closed(1, from: here) == nil)
        #expect(limit.requestRead(4, from: here, at: start) == .serve)
        #expect(limit.requestRead(6, from: here, at: start) == .wait(until: start + wait))
    }

    @Test("a suspended connection's wait ends at its deadline: refused and resumed; a newer connection with the same id is not refused early")
    func waitEnds() {
        var limit = full()
        let resumed = Mutex(0)
        #expect(limit.park(3, from: here) { resumed.withLock { $0 += 1 } })
        #expect(limit.waitEnded(3, from: here, at: start + wait - .milliseconds(1)) == nil)
        limit.waitEnded(3, from: here, at: start + wait)?()
        #expect(resumed.withLock { $0 } == 1)
        #expect(limit.requestRead(3, from: here, at: start + wait) == .refuse)
        #expect(limit.waitEnded(3, from: here, at: start + wait) == nil)
        // 3 closes and its id comes back on a connection opened later: the old deadline does not end its wait.
        #expect(limit.closed(3, from: here) == nil)
        #expect(limit.opened(3, from: here, at: start + wait) == .waiting)
        #expect(limit.park(3, from: here) {})
        #expect(limit.waitEnded(3, from: here, at: start + wait) == nil)
        #expect(limit.requestRead(3, from: here, at: start + wait) == .wait(until: start + wait * 2))
    }

    @Test("a waiting connection that closes gives up its turn: the next slot goes to the one behind it, or frees")
    func waitingCloses() {
        var limit = full()
        #expect(limit.closed(3, from: here) == nil)
        #expect(limit.closed(1, from: here) == nil)
        #expect(limit.requestRead(4, from: here, at: start) == .serve)
        #expect(limit.closed(2, from: here) == nil)
        #expect(limit.opened(5, from: here, at: start) == .counted)
        #expect(limit.opened(6, from: here, at: start) == .waiting)
    }

    @Test("thousands of waiting connections coming and going while the counted ones stay: the slot still goes to the one waiting")
    func churn() {
        var limit = AddressLimit(limit: 4, wait: wait)
        for id: UInt in 1...4 { #expect(limit.opened(id, from: here, at: start) == .counted) }
        #expect(limit.opened(5, from: here, at: start) == .waiting)
        for id: UInt in 100..<5_000 {
            #expect(limit.opened(id, from: here, at: start) == .waiting)
            #expect(limit.closed(id, from: here) == nil)
        }
        #expect(limit.opened(6, from: here, at: start) == .waiting)
        #expect(limit.closed(1, from: here) == nil)
        #expect(limit.requestRead(5, from: here, at: start) == .serve)
        #expect(limit.closed(2, from: here) == nil)
        #expect(limit.requestRead(6, from: here, at: start) == .serve)
    }

    @Test("addresses as keys: IPv4 in its IPv4-mapped IPv6 form, IPv6 as is")
    func addresses() {
        var v4 = sockaddr_in(), mapped = sockaddr_in6(), v6 = sockaddr_in6()
        v4.sin_family = sa_family_t(AF_INET)
        mapped.sin6_family = sa_family_t(AF_INET6)
        v6.sin6_family = sa_family_t(AF_INET6)
        inet_pton(AF_INET, "127.0.0.1", &v4.sin_addr)
        inet_pton(AF_INET6, "::ffff:127.0.0.1", &mapped.sin6_addr)
        inet_pton(AF_INET6, "2001:db8::1", &v6.sin6_addr)
        func key<T>(_ address: T) -> ClientAddress? {
            withUnsafePointer(to: address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { ClientAddress($0) } }
        }
        #expect(key(v4) == here)
        #expect(key(mapped) == here)
        #expect(key(v6) == ClientAddress(high: 0x2001_0db8_0000_0000, low: 1))
    }
}

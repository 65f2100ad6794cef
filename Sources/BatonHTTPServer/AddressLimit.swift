import Foundation

/// A client's IP address without the port, as a key: an IPv4 address in its IPv4-mapped IPv6 form.
struct ClientAddress: Hashable, Sendable {
    let high: UInt64
    let low: UInt64

    init(high: UInt64, low: UInt64) {
        self.high = high
        self.low = low
    }

    /// The address of an IPv4 or IPv6 socket address; nil for any other family.
    init?(_ address: UnsafePointer<sockaddr>) {
        switch Int32(address.pointee.sa_family) {
        case AF_INET:
            let v4 = address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { UInt32(bigEndian: $0.pointee.sin_addr.s_addr) }
            self.init(high: 0, low: 0xffff_0000_0000 | UInt64(v4))
        case AF_INET6:
            let v6 = address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { $0.pointee.sin6_addr }
            let (high, low) = withUnsafeBytes(of: v6) { ($0.loadUnaligned(as: UInt64.self), $0.loadUnaligned(fromByteOffset: 8, as: UInt64.self)) }
            self.init(high: UInt64(bigEndian: high), low: UInt64(bigEndian: low))
        default:
            return nil
        }
    }
}

/// Connections per client address against a limit (``HTTPServerConfiguration/connectionsPerAddress``), across every
/// daemon: the decisions only, with no socket, system call or clock. The server's libmicrohttpd callbacks drive it
/// under one lock, each step O(1) (amortized), passing the time in.
///
/// The server learns that a client closed a connection when that connection's daemon reads the end of the stream and
/// reports the close. A daemon accepts new connections before it reads its old ones, and another event loop's daemon
/// may hold them, so a client that closes connections and at once opens new ones can find the new ones over the limit
/// for a moment. Such a connection is not refused at once: it waits for a slot, and a close of one of its address's
/// counted connections hands that slot to the oldest one waiting. Only a connection still without a slot when its
/// request is read and ``wait`` has passed since it arrived is refused (answered 503 `too_many_connections`). Waiting
/// and refused connections together are at most as many as the limit; past them a new connection is dropped.
struct AddressLimit {
    /// What becomes of a new connection.
    enum Admission: Equatable {
        /// Within the limit: it holds a slot.
        case counted
        /// Over it: it waits for a slot.
        case waiting
        /// Over it with as many connections waiting or refused as the limit: closed unanswered.
        case dropped
    }

    /// What becomes of a connection whose request is read.
    enum Verdict: Equatable {
        /// It holds a slot: served.
        case serve
        /// Its wait passed without a slot: answered 503 `too_many_connections`, then closed.
        case refuse
        /// Still waiting: suspended (``park(_:from:resume:)``) until a slot frees or the wait ends at `until`.
        case wait(until: ContinuousClock.Instant)
    }

    /// The most connections one address may hold at once.
    let limit: Int
    /// How long a connection over the limit may wait for a slot.
    let wait: Duration
    private var addresses: [ClientAddress: Connections] = [:]

    init(limit: Int, wait: Duration) {
        self.limit = limit
        self.wait = wait
    }

    /// One address's connections. Only those over the limit are listed; the counted ones are a number.
    private struct Connections {
        var counted = 0
        /// Connections over the limit by id: waiting for a slot, or refused.
        var over: [UInt: Over] = [:]
        /// The waiting ones in order of arrival from `head` on; an id no longer waiting is skipped.
        var queue: [UInt] = []
        var head = 0

        var isEmpty: Bool { counted == 0 && over.isEmpty }
    }

    private enum Over {
        /// Waiting until `until`; `resume` is set once its request is read and its connection suspended.
        case waiting(until: ContinuousClock.Instant, resume: (@Sendable () -> Void)?)
        case refused

        var isWaiting: Bool {
            if case .waiting = self { return true }
            return false
        }
    }

    /// A connection `id` of `address` opened at `now`.
    mutating func opened(_ id: UInt, from address: ClientAddress, at now: ContinuousClock.Instant) -> Admission {
        let (limit, until) = (self.limit, now + wait)
        return update(address) { connections in
            // No connection waits while a slot is free: every close hands its slot to the oldest one waiting.
            if connections.counted < limit {
                connections.counted += 1
                return .counted
            }
            guard connections.over.count < limit else { return .dropped }
            if connections.queue.count >= 2 * limit {
                // Mostly ids no longer waiting: keep the others, so the queue stays under twice the limit.
                connections.queue = connections.queue[connections.head...].filter { connections.over[$0]?.isWaiting == true }
                connections.head = 0
            }
            connections.over[id] = .waiting(until: until, resume: nil)
            connections.queue.append(id)
            return .waiting
        }
    }

    /// The request of connection `id` is read at `now`: served if it holds a slot; refused if it still waits and its
    /// wait has passed; else it waits on.
    mutating func requestRead(_ id: UInt, from address: ClientAddress, at now: ContinuousClock.Instant) -> Verdict {
        update(address) { connections in
            switch connections.over[id] {
            case nil: return .serve
            case .refused: return .refuse
            case .waiting(let until, _):
                guard now >= until else { return .wait(until: until) }
                connections.over[id] = .refused
                return .refuse
            }
        }
    }

    /// Connection `id`, told to ``Verdict/wait(until:)`` and suspended since, is resumed by `resume` when a slot frees or
    /// its wait ends; false when either happened already (the caller resumes it itself).
    mutating func park(_ id: UInt, from address: ClientAddress, resume: @escaping @Sendable () -> Void) -> Bool {
        update(address) { connections in
            guard case .waiting(let until, nil)? = connections.over[id] else { return false }
            connections.over[id] = .waiting(until: until, resume: resume)
            return true
        }
    }

    /// The wait of connection `id` may have ended at `now`: if it is still waiting and its wait has passed, it is
    /// refused, and what resumes it is returned. An id reused by a newer connection is not refused: its wait ends later.
    mutating func waitEnded(_ id: UInt, from address: ClientAddress, at now: ContinuousClock.Instant) -> (@Sendable () -> Void)? {
        update(address) { connections in
            guard case .waiting(let until, let resume)? = connections.over[id], now >= until else { return nil }
            connections.over[id] = .refused
            return resume
        }
    }

    /// Connection `id` closed. A counted one's slot goes to the oldest connection waiting, if any; what resumes that
    /// one is returned when it is suspended waiting.
    mutating func closed(_ id: UInt, from address: ClientAddress) -> (@Sendable () -> Void)? {
        update(address) { connections in
            // Waiting or refused: it held no slot.
            if connections.over.removeValue(forKey: id) != nil { return nil }
            while connections.head < connections.queue.count {
                let next = connections.queue[connections.head]
                connections.head += 1
                if case .waiting(_, let resume)? = connections.over[next] {
                    connections.over[next] = nil
                    return resume
                }
            }
            connections.queue.removeAll()
            connections.head = 0
            connections.counted -= 1
            return nil
        }
    }

    /// Runs `body` on `address`'s connections in place, and forgets the address once it has none.
    private mutating func update<T>(_ address: ClientAddress, _ body: (inout Connections) -> T) -> T {
        let result = body(&addresses[address, default: Connections()])
        if addresses[address]?.isEmpty == true { addresses[address] = nil }
        return result
    }
}

import PushCore
import NIOCore

extension HTTP2ConnectionPoolStateMachine {
    /// The callers waiting for a stream of one endpoint: every urgent one is served before any
    /// bulk one, each kind first-in first-out, so a campaign's requests queued when the server grants
    /// fewer streams than Herald has permits never hold an urgent request back.
    struct WaiterQueue {
        private var urgent = CircularBuffer<Waiter>()
        private var bulk = CircularBuffer<Waiter>()

        var isEmpty: Bool { urgent.isEmpty && bulk.isEmpty }
        var count: Int { urgent.count + bulk.count }

        /// Whether a caller of `precedence` finds others it must wait behind.
        func hasWaiters(aheadOf precedence: StreamPrecedence) -> Bool {
            precedence == .urgent ? !urgent.isEmpty : !isEmpty
        }

        mutating func append(_ waiter: Waiter) {
            if waiter.precedence == .urgent { urgent.append(waiter) } else { bulk.append(waiter) }
        }

        /// The next waiter to serve: the oldest urgent one, else the oldest bulk one.
        mutating func popFirst() -> Waiter? {
            urgent.popFirst() ?? bulk.popFirst()
        }

        /// Removes the waiter `id` (its task was cancelled).
        mutating func remove(id: UInt64) -> Waiter? {
            if let index = urgent.firstIndex(where: { $0.id == id }) { return urgent.remove(at: index) }
            if let index = bulk.firstIndex(where: { $0.id == id }) { return bulk.remove(at: index) }
            return nil
        }

        /// Removes every waiter, urgent ones first.
        mutating func removeAll() -> [Waiter] {
            defer {
                urgent.removeAll()
                bulk.removeAll()
            }
            return Array(urgent) + Array(bulk)
        }

        /// Removes the waiters whose deadline passed at `now`; returns them and the earliest
        /// deadline of those kept.
        mutating func removeExpired(at now: NIODeadline) -> (expired: [Waiter], earliestKept: NIODeadline?) {
            var expired: [Waiter] = []
            var earliest: NIODeadline?
            func sweep(_ queue: inout CircularBuffer<Waiter>) {
                var kept = CircularBuffer<Waiter>(initialCapacity: queue.count)
                for waiter in queue {
                    if waiter.deadline <= now {
                        expired.append(waiter)
                    } else {
                        kept.append(waiter)
                        earliest = earliest.map { min($0, waiter.deadline) } ?? waiter.deadline
                    }
                }
                queue = kept
            }
            sweep(&urgent)
            sweep(&bulk)
            return (expired, earliest)
        }
    }
}

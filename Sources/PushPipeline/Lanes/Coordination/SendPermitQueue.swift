/// The send permits (HERALD_MAX_CONCURRENT_SENDS) as a value: how many are free, and who waits
/// for one in which lane, urgent before bulk, each in arrival order. Part of
/// ``DeliveryCoordinator/StateMachine``, which takes one permit per device before its send starts and gives
/// it back once the result is published, so a burst of large fan-outs queues here, as neither
/// tasks nor requests, and a crash can repeat at most `limit` pushes.
///
/// Every decision (grant, queue, hand a released permit to a waiter) is one call, so
/// the caller makes it in one lock section and resumes the waiters it is given outside it.
///
/// A permit released between a sender's "none free" and its registration as a waiter can
/// therefore not be lost: ``enqueue(_:id:lane:)`` looks at the free permits again in the same
/// section in which it would register.
struct SendPermitQueue<Waiter> {
    typealias Lane = InputLane.Priority

    /// The result of ``enqueue(_:id:lane:)``.
    enum EnqueueAction {
        /// A permit was free after all (released since ``tryAcquire(_:)``): resume the waiter now.
        case resume(Waiter)
        /// Registered; a later ``release(_:from:)`` or ``cancel(id:)`` hands the waiter back.
        case wait
    }

    let limit: Int
    /// The most permits bulk senders hold at once: the rest stay for urgent ones, so an
    /// urgent send finds a permit (and an HTTP/2 stream) free while a campaign runs.
    let bulkLimit: Int
    private(set) var available: Int
    /// Permits bulk senders hold now.
    private(set) var heldByBulk = 0
    private var urgent = FIFO()
    private var bulk = FIFO()

    /// `bulkShare` of the permits (at least one) may go to bulk senders at once.
    init(limit: Int, bulkShare: Double = 1) {
        self.limit = max(1, limit)
        bulkLimit = max(1, min(self.limit, Int(Double(self.limit) * bulkShare)))
        available = self.limit
    }

    /// Permits held now (above `limit` for the moment fenced waiters hold theirs:
    /// ``grantFenced(where:)``).
    var inUse: Int { limit - available }

    /// Senders waiting in `lane`.
    func waiting(_ lane: Lane) -> Int {
        lane == .urgent ? urgent.count : bulk.count
    }

    /// Takes a permit when one is free and nobody waits ahead of `lane` (an urgent sender
    /// waits only behind urgent ones, a bulk sender behind everyone); false otherwise.
    mutating func tryAcquire(_ lane: Lane) -> Bool {
        guard available > 0, urgent.isEmpty else { return false }
        if lane == .bulk {
            guard bulk.isEmpty, heldByBulk < bulkLimit else { return false }
            heldByBulk += 1
        }
        available -= 1
        return true
    }

    /// Registers a sender that ``tryAcquire(_:)`` turned away, unless a permit is free for it now.
    mutating func enqueue(_ waiter: Waiter, id: UInt64, lane: Lane) -> EnqueueAction {
        if tryAcquire(lane) { return .resume(waiter) }
        if lane == .urgent {
            urgent.append((id, waiter))
        } else {
            bulk.append((id, waiter))
        }
        return .wait
    }

    /// Removes the waiter `id` (its task was cancelled); nil when it was already granted.
    mutating func cancel(id: UInt64) -> Waiter? {
        urgent.remove(id: id) ?? bulk.remove(id: id)
    }

    /// Hands a permit to every waiter `isFenced` picks (its send's message was fenced while it
    /// waited), free or not, and returns them in arrival order: each starts no request and gives
    /// its permit back at once, so the limit still bounds the requests in flight, and a
    /// revocation's drain never waits for a permit to free up.
    mutating func grantFenced(where isFenced: (Waiter) -> Bool) -> [Waiter] {
        let urgentFenced = urgent.removeAll(where: isFenced)
        let bulkFenced = bulk.removeAll(where: isFenced)
        for _ in urgentFenced { grantFenced(.urgent) }
        for _ in bulkFenced { grantFenced(.bulk) }
        return urgentFenced + bulkFenced
    }

    /// Hands a permit of `lane` to a sender whose send is fenced already, free or not
    /// (``grantFenced(where:)``).
    mutating func grantFenced(_ lane: Lane) {
        available -= 1
        if lane == .bulk { heldByBulk += 1 }
    }

    /// Gives back `count` permits held by `lane`'s senders: urgent waiters first, then bulk
    /// ones within the bulk share, each lane in arrival order; returns the waiters that now
    /// hold them, to be resumed.
    mutating func release(_ count: Int, from lane: Lane) -> [Waiter] {
        available += count
        if lane == .bulk { heldByBulk -= count }
        var granted: [Waiter] = []
        while available > 0, let next = urgent.popFirst() {
            available -= 1
            granted.append(next.waiter)
        }
        while available > 0, heldByBulk < bulkLimit, let next = bulk.popFirst() {
            available -= 1
            heldByBulk += 1
            granted.append(next.waiter)
        }
        return granted
    }

    /// Waiters in arrival order; popping is O(1) (a head index, compacted now and then).
    private struct FIFO {
        private var entries: [(id: UInt64, waiter: Waiter)?] = []
        private var head = 0
        private(set) var count = 0

        var isEmpty: Bool { count == 0 }

        mutating func append(_ entry: (id: UInt64, waiter: Waiter)) {
            entries.append(entry)
            count += 1
        }

        mutating func popFirst() -> (id: UInt64, waiter: Waiter)? {
            while head < entries.count {
                defer { head += 1 }
                if let entry = entries[head] {
                    entries[head] = nil
                    count -= 1
                    compactIfMostlyEmpty()
                    return entry
                }
            }
            return nil
        }

        mutating func remove(id: UInt64) -> Waiter? {
            guard let index = entries[head...].firstIndex(where: { $0?.id == id }), let entry = entries[index] else { return nil }
            entries[index] = nil
            count -= 1
            return entry.waiter
        }

        /// Removes the waiters `predicate` picks; returns them in arrival order.
        mutating func removeAll(where predicate: (Waiter) -> Bool) -> [Waiter] {
            var removed: [Waiter] = []
            for index in entries.indices.dropFirst(head) {
                guard let entry = entries[index], predicate(entry.waiter) else { continue }
                entries[index] = nil
                count -= 1
                removed.append(entry.waiter)
            }
            return removed
        }

        private mutating func compactIfMostlyEmpty() {
            guard head >= 1024, head * 2 >= entries.count else { return }
            entries.removeFirst(head)
            head = 0
        }
    }
}

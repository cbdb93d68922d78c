import PushStores
/// The (event, target) deliveries this process is sending, and those it recorded lately: a copy
/// of an event (a duplicate on push.requests) never pushes a device that another copy is
/// pushing or has pushed, even when its ledger lookup ran before that outcome was recorded.
///
/// Deliveries are known by a 64-bit hash of (event, target), not by their outcomes: the recent
/// outcomes themselves took many times the memory of their hashes (`herald-bench pipeline`, RSS;
/// BENCHMARKS.md, "What each change bought"). A hash that matches is only a reason to ask the
/// ledger; a collision costs a lookup or a wait, never a lost or a second push.
///
/// A copy that finds the delivery busy waits for its claim to be settled: `Waiter` is what the
/// caller resumes then (a continuation in the pipeline), returned by ``settle(_:)``.
struct DeliveryClaimTable<Waiter> {
    enum Claim: Equatable {
        /// The caller sends, and settles the claim once the outcome is recorded.
        case claimed
        /// Recorded lately (or a hash collision): the caller asks the ledger for the outcome.
        case recordedLately
        /// Another copy is sending: the caller waits (``wait(for:id:_:)``) and claims again.
        case busy
    }

    private struct Waiting {
        var id: UInt64
        var waiter: Waiter
    }

    private var sending: Set<Int> = []
    private var recent: Set<Int> = []
    /// `recent` in insertion order, a ring: the oldest is dropped first.
    private var order: [Int] = []
    private var oldest = 0
    private let capacity: Int
    /// Callers waiting for a claim to be settled, by key.
    private var waiting: [Int: [Waiting]] = [:]
    /// Waits cancelled before they were registered (their registration is then refused).
    private var cancelledWaits: Set<UInt64> = []

    /// Remembers the last `recentCapacity` recorded deliveries. Storage is reserved up front:
    /// growing a set by doubling rehashes it inside the pipeline's lock.
    init(recentCapacity: Int) {
        capacity = max(1, recentCapacity)
        recent.reserveCapacity(capacity)
        order.reserveCapacity(capacity)
    }

    /// The key of (event, target): the target's kind is part of it, so an iPhone and an Android
    /// phone whose tokens have one text never wait on each other's claim.
    static func key(eventID: String, target: LedgerTarget) -> Int {
        var hasher = Hasher()
        hasher.combine(eventID)
        hasher.combine(target)
        return hasher.finalize()
    }

    /// Deliveries claimed and not yet settled.
    var sendingCount: Int { sending.count }
    /// Copies waiting for a claim to be settled.
    var waitingCount: Int { waiting.values.reduce(0) { $0 + $1.count } }

    mutating func claim(_ key: Int) -> Claim {
        if recent.contains(key) { return .recordedLately }
        return claimSending(key)
    }

    /// Claims without looking at what was recorded lately: for a caller whose ledger lookup
    /// found no outcome after ``claim(_:)`` said `recordedLately`.
    mutating func claimSending(_ key: Int) -> Claim {
        sending.insert(key).inserted ? .claimed : .busy
    }

    /// Registers `waiter` until the claim on `key` is settled; false (nothing registered) when
    /// no copy is sending it any more or the wait `id` was already cancelled: claim again now.
    mutating func wait(for key: Int, id: UInt64, _ waiter: Waiter) -> Bool {
        if cancelledWaits.remove(id) != nil || !sending.contains(key) { return false }
        waiting[key, default: []].append(Waiting(id: id, waiter: waiter))
        return true
    }

    /// Cancels the wait `id`: returns its waiter when it was registered, else refuses its registration.
    mutating func cancelWait(for key: Int, id: UInt64) -> Waiter? {
        guard let index = waiting[key]?.firstIndex(where: { $0.id == id }) else {
            cancelledWaits.insert(id)
            return nil
        }
        let cancelled = waiting[key]!.remove(at: index)
        if waiting[key]!.isEmpty { waiting[key] = nil }
        return cancelled.waiter
    }

    /// Ends a claim once its outcome is recorded; returns the callers waiting for it.
    mutating func settle(_ key: Int) -> [Waiter] {
        sending.remove(key)
        defer { remember(key) }
        return waiting.removeValue(forKey: key)?.map(\.waiter) ?? []
    }

    /// Ends a claim with no outcome recorded (its send was fenced off): returns the callers
    /// waiting for it, which claim again and may send.
    mutating func release(_ key: Int) -> [Waiter] {
        sending.remove(key)
        return waiting.removeValue(forKey: key)?.map(\.waiter) ?? []
    }

    private mutating func remember(_ key: Int) {
        guard recent.insert(key).inserted else { return }
        if order.count < capacity {
            order.append(key)
        } else {
            recent.remove(order[oldest])
            order[oldest] = key
            oldest = (oldest + 1) % capacity
        }
    }
}

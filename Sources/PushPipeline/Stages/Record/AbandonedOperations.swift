import Synchronization

/// Operations ``withTimeout(_:tracking:abandoning:)`` stopped waiting for (time-out or caller
/// cancelled) that have not ended yet: each still holds what it held (a PostgreSQL connection
/// mid-query, say) until it ends by itself. At most `limit` are abandoned at a time-out: the
/// count is taken as the operation is abandoned, so callers that time out together cannot pass
/// it; a caller past it waits for its operation instead. (A caller that is cancelled, at shutdown,
/// always stops waiting.)
package final class AbandonedOperations: Sendable {
    private let running = Atomic(0)
    /// The most operations left running by time-outs.
    package let limit: Int

    package init(limit: Int = .max) {
        self.limit = limit
    }

    /// How many are still running.
    package var count: Int { running.load(ordering: .relaxed) }

    /// Whether another time-out would find the bound full.
    package var isFull: Bool { count >= limit }

    /// Counts one more abandoned at a time-out, unless `limit` are already: false then.
    func abandonWithinLimit() -> Bool {
        var current = running.load(ordering: .relaxed)
        while current < limit {
            let (exchanged, original) = running.compareExchange(expected: current, desired: current + 1, ordering: .relaxed)
            if exchanged { return true }
            current = original
        }
        return false
    }

    func abandoned() { running.add(1, ordering: .relaxed) }
    func ended() { running.subtract(1, ordering: .relaxed) }
}

/// Everything the pipeline coordinates for the notifications in flight, as one value: the
/// (event, device) claims, the send permits and the progress of every poll batch towards its
/// messages' last published result.
///
/// A notification's whole life goes through it: its batch is opened with the number of results
/// each message publishes; its device is claimed, so no copy of the event pushes it twice; a
/// permit is taken before its send; once the ledger recorded the outcome the claim is settled;
/// once the result is published, one call gives the permit back (to the next waiter), counts the
/// result and says which messages are finished. A fenced send (its partition revoked) gives up
/// claim, permit and message in one call.
///
/// Every method is one decision taken in one lock section by ``DeliveryCoordinator``, which
/// resumes the waiters it is given outside the lock: a permit or a settlement can therefore not
/// fall between a caller's "none free" and its registration as a waiter (the lost wake-up).
struct DeliveryCoordination<Waiter> {
    typealias Claim = DeliveryClaimTable<Waiter>.Claim
    typealias Lane = InputLane.Priority

    /// What the caller does next, outside the lock.
    struct Actions {
        /// Waiters to resume: permits handed to them, claims settled, batches finished.
        var resume: [Waiter] = []
        /// Indexes, into the results given to ``published(_:)``, of those that were the last
        /// result of their message: the caller finishes those messages, or gives up those with
        /// a fenced send (`givenUp`), whose new owner delivers them.
        var finished: [(index: Int, givenUp: Bool)] = []
    }

    /// One published result: of which message of which batch, and the lane of the permit its
    /// send held (nil: it needed no send, or was republished).
    struct PublishedResult {
        var batch: UInt64
        var message: Int
        var permit: Lane?
    }

    /// The batches with messages still to finish, by ID.
    private var batches: [UInt64: BatchProgress] = [:]
    private var nextBatchID: UInt64 = 0
    private var claims: DeliveryClaimTable<Waiter>
    private var permits: SendPermitQueue<Waiter>

    /// `permitLimit` sends at once, `bulkShare` of them for bulk senders at most; the last
    /// `recentCapacity` recorded deliveries are remembered for copies of their events.
    init(permitLimit: Int, bulkShare: Double, recentCapacity: Int) {
        claims = DeliveryClaimTable(recentCapacity: recentCapacity)
        permits = SendPermitQueue(limit: permitLimit, bulkShare: bulkShare)
    }

    /// Permits held now.
    var permitsHeld: Int { permits.inUse }

    /// Senders waiting for a permit in `lane` now.
    func waitingForPermit(_ lane: Lane) -> Int { permits.waiting(lane) }

    /// Batches with messages still to finish.
    var openBatches: Int { batches.count }

    // MARK: Batches

    /// Opens a batch whose message `i` publishes `results[i]` results (none: finished already);
    /// returns its ID.
    mutating func openBatch(results: [Int]) -> UInt64 {
        nextBatchID += 1
        let progress = BatchProgress(pending: results)
        if progress.unfinished > 0 { batches[nextBatchID] = progress }
        return nextBatchID
    }

    /// Registers `waiter` until every message of `batch` is finished; false (nothing
    /// registered) when they already are: resume it now.
    mutating func waitForBatch(_ batch: UInt64, _ waiter: Waiter) -> Bool {
        guard batches[batch] != nil else { return false }
        batches[batch]?.waiter = waiter
        return true
    }

    /// Stops waiting for `batch` (its task was cancelled): returns the registered waiter.
    mutating func cancelBatchWait(_ batch: UInt64) -> Waiter? {
        defer { batches[batch]?.waiter = nil }
        return batches[batch]?.waiter
    }

    // MARK: Claims

    /// Claims (event, device) `key` for sending, unless it was recorded lately or is busy.
    mutating func claim(_ key: Int) -> Claim { claims.claim(key) }

    /// Claims `key` for sending whatever was recorded lately (the ledger had no outcome).
    mutating func claimSending(_ key: Int) -> Claim { claims.claimSending(key) }

    /// Registers `waiter` until the claim on `key` is settled; false when it already is or the
    /// wait `id` was cancelled: claim again now.
    mutating func waitForClaim(_ key: Int, id: UInt64, _ waiter: Waiter) -> Bool {
        claims.wait(for: key, id: id, waiter)
    }

    /// Cancels the wait `id` for `key`: its waiter when it was registered.
    mutating func cancelClaimWait(_ key: Int, id: UInt64) -> Waiter? {
        claims.cancelWait(for: key, id: id)
    }

    /// The ledger recorded the outcomes of these claims: ends them; returns who waited for them.
    mutating func recorded(_ keys: [Int]) -> [Waiter] {
        keys.flatMap { claims.settle($0) }
    }

    // MARK: Permits

    /// Takes a permit when one is free for `lane` and nobody waits ahead.
    mutating func tryAcquirePermit(_ lane: Lane) -> Bool { permits.tryAcquire(lane) }

    /// Takes up to `count` permits that are free for `lane` with nobody waiting ahead; returns
    /// how many it took.
    mutating func tryAcquirePermits(_ lane: Lane, upTo count: Int) -> Int {
        var taken = 0
        while taken < count, permits.tryAcquire(lane) { taken += 1 }
        return taken
    }

    /// Registers a sender that ``tryAcquirePermit(_:)`` turned away, unless a permit is free
    /// for it now (released in between).
    mutating func waitForPermit(_ waiter: Waiter, id: UInt64, lane: Lane) -> SendPermitQueue<Waiter>.EnqueueAction {
        permits.enqueue(waiter, id: id, lane: lane)
    }

    /// Removes the permit waiter `id` (its task was cancelled); nil when it holds a permit already.
    mutating func cancelPermitWait(id: UInt64) -> Waiter? { permits.cancel(id: id) }

    // MARK: Outcomes

    /// Results were published: gives back the permits their sends held (to the waiters first in
    /// line) and counts each against its message; says which messages are now finished and
    /// resumes the batches that have nothing left. A result of a message that was abandoned (or
    /// of a batch already finished) finishes nothing.
    mutating func published(_ results: [PublishedResult]) -> Actions {
        var actions = Actions()
        var returned: [Lane: Int] = [:]
        for (index, result) in results.enumerated() {
            if let lane = result.permit { returned[lane, default: 0] += 1 }
            guard let settled = batches[result.batch]?.publish(result.message) else { continue }
            actions.finished.append((index, settled == .givenUp))
            if let waiter = closeIfFinished(result.batch) { actions.resume.append(waiter) }
        }
        // Urgent first: its waiters are served before bulk ones either way.
        for lane in Lane.allCases {
            if let count = returned[lane] { actions.resume += permits.release(count, from: lane) }
        }
        return actions
    }

    /// A send was fenced off (its partition revoked, or being drained, before its next attempt):
    /// ends its claim without an outcome and gives its permit back (nil: it held none yet). Its
    /// message will not finish here: `givenUp` is true when this was the message's last result
    /// outstanding, so the caller gives the message up (the new owner delivers it).
    mutating func fenced(batch: UInt64, message: Int, claim: Int?, permit: Lane?) -> (actions: Actions, givenUp: Bool) {
        var actions = Actions()
        if let claim { actions.resume += claims.release(claim) }
        if let permit { actions.resume += permits.release(1, from: permit) }
        guard batches[batch]?.fence(message) == .givenUp else { return (actions, false) }
        if let waiter = closeIfFinished(batch) { actions.resume.append(waiter) }
        return (actions, true)
    }

    /// Forgets `batch` once none of its messages is left to finish; returns its waiting task.
    private mutating func closeIfFinished(_ batch: UInt64) -> Waiter? {
        guard let progress = batches[batch], progress.unfinished == 0 else { return nil }
        batches[batch] = nil
        return progress.waiter
    }

    /// The results still to publish for each message of one batch.
    private struct BatchProgress {
        /// How a message with no result left to publish ended.
        enum Settled { case finished, givenUp }

        var pending: [Int]
        /// Messages with a fenced send: they are given up, not finished, once nothing is pending.
        var fencedMessages: Set<Int> = []
        /// Messages with results still to publish.
        var unfinished: Int
        /// The batch's task, waiting until `unfinished` is 0.
        var waiter: Waiter?

        init(pending: [Int]) {
            self.pending = pending
            unfinished = pending.count { $0 > 0 }
        }

        /// Counts a published result of `message`; how the message ended when it was its last.
        mutating func publish(_ message: Int) -> Settled? {
            guard pending[message] > 0 else { return nil }
            pending[message] -= 1
            guard pending[message] == 0 else { return nil }
            unfinished -= 1
            return fencedMessages.contains(message) ? .givenUp : .finished
        }

        /// Counts a result of `message` that will never be published (its send was fenced).
        mutating func fence(_ message: Int) -> Settled? {
            fencedMessages.insert(message)
            return publish(message)
        }
    }
}

import Synchronization

/// ``DeliveryCoordination`` behind one lock, with the waiting done: each call takes one
/// decision in one lock section and resumes the waiters it returns outside it. The pipeline's
/// only owner of claims, send permits and batch progress.
final class DeliveryCoordinator: Sendable {
    typealias Lane = InputLane.Priority
    typealias Coordination = DeliveryCoordination<CheckedContinuation<Void, any Error>>

    private let state: Mutex<Coordination>
    /// Identifies each wait for a permit or a claim, so a cancelled wait finds its own.
    private let waitIDs = Atomic<UInt64>(0)

    /// See ``DeliveryCoordination/init(permitLimit:bulkShare:recentCapacity:)``.
    init(permitLimit: Int, bulkShare: Double = 1, recentCapacity: Int = 100_000) {
        state = Mutex(Coordination(permitLimit: permitLimit, bulkShare: bulkShare, recentCapacity: recentCapacity))
    }

    /// The claim key of (event, token): a 64-bit hash (``DeliveryClaimTable``).
    static func claimKey(eventID: String, token: String) -> Int {
        DeliveryClaimTable<Never>.key(eventID: eventID, token: token)
    }

    /// Send permits held now.
    var permitsHeld: Int { state.withLock { $0.permitsHeld } }

    /// Senders waiting for a permit in `lane` now.
    func waitingForPermit(_ lane: Lane) -> Int { state.withLock { $0.waitingForPermit(lane) } }

    /// Batches with messages still to finish.
    var openBatches: Int { state.withLock { $0.openBatches } }

    /// Opens a batch (``DeliveryCoordination/openBatch(results:)``) and claims `keys` for
    /// sending, in one lock section; returns the batch's ID and each key's claim.
    func openBatch(results: [Int], claiming keys: [Int]) -> (batch: UInt64, claims: [Coordination.Claim]) {
        state.withLock { state in
            (state.openBatch(results: results), keys.map { state.claim($0) })
        }
    }

    /// See ``DeliveryCoordination/claim(_:)``.
    func claim(_ key: Int) -> Coordination.Claim { state.withLock { $0.claim(key) } }

    /// See ``DeliveryCoordination/claimSending(_:)``.
    func claimSending(_ key: Int) -> Coordination.Claim { state.withLock { $0.claimSending(key) } }

    /// Returns once every message of `batch` is finished (or at once when they are), or when cancelled.
    func waitUntilFinished(_ batch: UInt64) async {
        await withTaskCancellationHandler {
            try? await withCheckedThrowingContinuation { continuation in
                let registered = state.withLock { state in
                    // Checked under the lock: a cancellation handler that already ran found nothing.
                    !Task.isCancelled && state.waitForBatch(batch, continuation)
                }
                if !registered { continuation.resume() }
            }
        } onCancel: {
            state.withLock { $0.cancelBatchWait(batch) }?.resume(throwing: CancellationError())
        }
    }

    /// Returns once the claim on `key` is settled (or at once when it is), or when cancelled.
    func waitUntilSettled(_ key: Int) async {
        let id = waitIDs.add(1, ordering: .relaxed).newValue
        await withTaskCancellationHandler {
            try? await withCheckedThrowingContinuation { continuation in
                if !state.withLock({ $0.waitForClaim(key, id: id, continuation) }) { continuation.resume() }
            }
        } onCancel: {
            state.withLock { $0.cancelClaimWait(key, id: id) }?.resume(throwing: CancellationError())
        }
    }

    /// Takes a send permit, waiting behind the earlier waiters of `lane` (and, for bulk, behind
    /// every urgent one); throws `CancellationError` if cancelled while waiting. The permit is
    /// given back by ``published(_:)`` or ``fenced(batch:message:claim:permit:)``.
    func acquirePermit(_ lane: Lane) async throws {
        if state.withLock({ $0.tryAcquirePermit(lane) }) { return }
        let id = waitIDs.add(1, ordering: .relaxed).newValue
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let action = state.withLock { state -> SendPermitQueue<CheckedContinuation<Void, any Error>>.EnqueueAction? in
                    // Checked under the lock: a cancellation handler that already ran found nothing to remove.
                    if Task.isCancelled { return nil }
                    return state.waitForPermit(continuation, id: id, lane: lane)
                }
                switch action {
                case nil: continuation.resume(throwing: CancellationError())
                case .resume(let waiter): waiter.resume()
                case .wait: break
                }
            }
        } onCancel: {
            state.withLock { $0.cancelPermitWait(id: id) }?.resume(throwing: CancellationError())
        }
    }

    /// Takes at least one send permit (waiting as ``acquirePermit(_:)`` does when none is free)
    /// and at most `count`: as many as are free once it has the first. Returns how many.
    func acquirePermits(_ lane: Lane, upTo count: Int) async throws -> Int {
        let taken = state.withLock { $0.tryAcquirePermits(lane, upTo: count) }
        if taken > 0 { return taken }
        try await acquirePermit(lane)
        return 1 + state.withLock { $0.tryAcquirePermits(lane, upTo: count - 1) }
    }

    /// The ledger recorded the outcomes of these claims: ends them and wakes their waiters.
    func recorded(_ keys: [Int]) {
        guard !keys.isEmpty else { return }
        resume(state.withLock { $0.recorded(keys) })
    }

    /// See ``DeliveryCoordination/published(_:)``; returns the indexes of the results that
    /// were their message's last, and whether that message is given up rather than finished.
    func published(_ results: [Coordination.PublishedResult]) -> [(index: Int, givenUp: Bool)] {
        let actions = state.withLock { $0.published(results) }
        resume(actions.resume)
        return actions.finished
    }

    /// See ``DeliveryCoordination/fenced(batch:message:claim:permit:)``; true when the message
    /// has nothing left outstanding and is given up.
    func fenced(batch: UInt64, message: Int, claim: Int?, permit: Lane?) -> Bool {
        let outcome = state.withLock { $0.fenced(batch: batch, message: message, claim: claim, permit: permit) }
        resume(outcome.actions.resume)
        return outcome.givenUp
    }

    private func resume(_ waiters: [CheckedContinuation<Void, any Error>]) {
        for waiter in waiters { waiter.resume() }
    }
}

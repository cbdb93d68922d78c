import PushStores
import Dispatch
import PushCore
import KafkaMessages
import Synchronization

/// ``StateMachine`` behind one lock, with the waiting done: each call takes one decision in one
/// lock section and performs what it returns outside it (resuming waiters, signalling a drain).
/// The pipeline's only owner of what a message goes through in this member: its offsets and
/// fence, claims, send permits and batch progress.
final class DeliveryCoordinator: Sendable {
    typealias Lane = InputLane.Priority
    typealias Machine = StateMachine<CheckedContinuation<Void, any Error>, PendingOutcome>

    /// Where a lane's member stands in its life. (A revocation drains partitions one by one
    /// while the member runs: ``OffsetTracker``.)
    enum Lifecycle: Sendable {
        /// Polling and starting messages.
        case running
        /// A graceful stop began: no message starts; what was started finishes.
        case stopping
        /// It committed what it finished and left its group.
        case stopped
    }

    private let state: Mutex<Machine>
    /// Identifies each wait for a permit or a claim, so a cancelled wait finds its own.
    private let waitIDs = Atomic<UInt64>(0)
    /// Per lane, signalled when the last message of the partitions being drained settles; waited
    /// on by the lane's poll thread (the rebalance callback may block; it never runs on the
    /// cooperative pool).
    private let drained: [Lane: DispatchSemaphore] = [.urgent: DispatchSemaphore(value: 0), .bulk: DispatchSemaphore(value: 0)]

    /// See ``StateMachine/init(permitLimit:bulkShare:recentCapacity:outcomesPerWrite:)``.
    init(permitLimit: Int, bulkShare: Double = 1, recentCapacity: Int = 100_000, outcomesPerWrite: Int = 500) {
        state = Mutex(Machine(permitLimit: permitLimit, bulkShare: bulkShare, recentCapacity: recentCapacity, outcomesPerWrite: outcomesPerWrite))
    }

    /// The claim key of (event, target): a 64-bit hash (``DeliveryClaimTable``).
    static func claimKey(eventID: String, target: LedgerTarget) -> Int {
        DeliveryClaimTable<Never>.key(eventID: eventID, target: target)
    }

    /// Reads the state in one lock section.
    func read<Result: Sendable>(_ body: (Machine) -> Result) -> Result {
        state.withLock { body($0) }
    }

    /// Send permits held now.
    var permitsHeld: Int { read(\.permitsHeld) }

    /// Senders waiting for a permit in `lane` now.
    func waitingForPermit(_ lane: Lane) -> Int { read { $0.waitingForPermit(lane) } }

    /// Batches with messages still to finish.
    var openBatches: Int { read(\.openBatches) }

    // MARK: Offsets

    /// Starts the messages of a poll of `lane` in one step (``StateMachine/start(_:lane:)``);
    /// leaves out those whose partition is not this member's or is being drained: they must not
    /// start.
    func start(_ messages: [KafkaMessage], lane: Lane, polledAtMilliseconds: Int64) -> [StartedMessage] {
        let generations = state.withLock { state in messages.map { state.start($0, lane: lane) } }
        return zip(messages, generations).compactMap { message, generation in
            generation.map { StartedMessage(message, lane: lane, generation: $0, polledAtMilliseconds: polledAtMilliseconds) }
        }
    }

    /// Whether message `message` of `batch` may no longer start a push attempt here.
    func isFenced(batch: UInt64, message: Int) -> Bool { read { $0.isFenced(batch: batch, message: message) } }

    /// See ``StateMachine/assign(_:lane:)``.
    func assign(_ partitions: [KafkaTopicPartition], lane: Lane) {
        state.withLock { $0.assign(partitions, lane: lane) }
    }

    /// See ``StateMachine/markCommitted(_:lane:)``.
    func markCommitted(_ offsets: [KafkaTopicPartition: Int64], lane: Lane) {
        state.withLock { $0.markCommitted(offsets, lane: lane) }
    }

    /// Forgets revoked partitions; returns the offsets to commit for them before they go.
    func revoke(_ partitions: [KafkaTopicPartition], lane: Lane) -> [KafkaTopicPartition: Int64] {
        let revoked = state.withLock { $0.revoke(partitions, lane: lane) }
        perform(revoked.actions)
        return revoked.offsets
    }

    /// Marks a message without a batch whose results are all published (a token update, a
    /// channel command, a dead letter); its offset may now be committed.
    func finish(_ message: StartedMessage) {
        perform(state.withLock { $0.finish(message.position) })
    }

    /// Waits until at most `inFlight` messages of `lane` are in flight, or `patience` passed (nil:
    /// no bound), or the task is cancelled; woken by the settlement that makes the room, not by
    /// polling.
    func waitForRoom(_ lane: Lane, inFlightAtMost inFlight: Int, patience: Duration?) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                await withTaskCancellationHandler {
                    try? await withCheckedThrowingContinuation { continuation in
                        let registered = self.state.withLock { state in
                            !Task.isCancelled && state.waitForRoom(lane, atMost: inFlight, continuation)
                        }
                        if !registered { continuation.resume() }
                    }
                } onCancel: {
                    self.state.withLock { $0.cancelRoomWait(lane) }?.resume()
                }
            }
            if let patience { group.addTask { try? await PipelineClock().sleep(for: patience) } }
            await group.next()
            group.cancelAll()
        }
    }

    /// Drains `partitions` of `lane` before they are revoked (``StateMachine/beginDrain(_:lane:)``):
    /// blocks the calling thread, which must not be one of the cooperative pool's, until their
    /// in-flight messages are finished or given up, or `timeout` passed; returns how many are left.
    func drain(_ partitions: [KafkaTopicPartition], lane: Lane, timeout: Duration) -> Int {
        guard let drained = drained[lane] else { return 0 }
        // A signal left from an earlier drain that timed out as its last message finished.
        while drained.wait(timeout: .now()) == .success {}
        let begun = state.withLock { $0.beginDrain(partitions, lane: lane) }
        perform(begun.actions)
        var left = begun.inFlight
        let clock = PipelineClock()
        let deadline = clock.now + timeout
        // Each partition that empties signals once; the wait ends when all of them have.
        while left > 0, clock.wait(for: drained, until: deadline) {
            left = read { $0.inFlightCount(in: partitions, lane: lane) }
        }
        return read { $0.inFlightCount(in: partitions, lane: lane) }
    }

    /// See ``StateMachine/beginStop(_:givingUpUnstarted:)``.
    func beginStop(_ lane: Lane, givingUpUnstarted: Bool) {
        perform(state.withLock { $0.beginStop(lane, givingUpUnstarted: givingUpUnstarted) })
    }

    /// `lane`'s member left its group.
    func left(_ lane: Lane) { state.withLock { $0.left(lane) } }

    // MARK: Batches and claims

    /// A poll batch's lookups are in (``StateMachine/resolved(_:results:sends:lane:paced:)``):
    /// opens the batch of `messages`, claims its sends and takes the permits free for them, in
    /// one lock section; returns the batch's ID and each send's step.
    func resolved(
        _ messages: [StartedMessage], results: [Int], sends: [(message: Int, claim: Int)], lane: Lane, paced: Bool
    ) -> (batch: UInt64, steps: [Machine.SendStep]) {
        let positions = messages.map(\.position)
        let resolved = state.withLock { $0.resolved(positions, results: results, sends: sends, lane: lane, paced: paced) }
        perform(resolved.actions)
        return (resolved.batch, resolved.steps)
    }

    /// See ``StateMachine/claim(_:)``.
    func claim(_ key: Int) -> Machine.Claim { state.withLock { $0.claim(key) } }

    /// See ``StateMachine/claimSending(_:)``.
    func claimSending(_ key: Int) -> Machine.Claim { state.withLock { $0.claimSending(key) } }

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

    /// Waits `duration`, or less once message `message` of `batch` is fenced (its partition
    /// revoked or being drained: the wait is woken then, not when it ends); throws only when
    /// cancelled.
    func wait(_ duration: Duration, unlessFenced batch: UInt64, message: Int) async throws(CancellationError) {
        let id = waitIDs.add(1, ordering: .relaxed).newValue
        let woken: Void? = await withTaskGroup(of: Void?.self) { group in
            group.addTask { try? await PipelineClock().sleep(for: duration) }
            group.addTask {
                await withTaskCancellationHandler {
                    try? await withCheckedThrowingContinuation { continuation in
                        let registered = self.state.withLock { state in
                            !Task.isCancelled && state.waitForFence(batch: batch, message: message, id: id, continuation)
                        }
                        if !registered { continuation.resume() }
                    }
                } onCancel: {
                    self.state.withLock { $0.cancelFenceWait(id: id) }?.resume(throwing: CancellationError())
                }
            }
            defer { group.cancelAll() }
            return await group.next() ?? nil
        }
        if woken == nil || Task.isCancelled { throw CancellationError() }
    }

    // MARK: Permits

    /// Takes a send permit, waiting behind the earlier waiters of `lane` (and, for bulk, behind
    /// every urgent one); throws `CancellationError` if cancelled while waiting. The permit is
    /// given back by ``published(_:)`` or ``fenced(batch:message:claim:permit:)``. A wait for
    /// a send of message `message` of `batch` ends as soon as that message is fenced (a
    /// revocation's drain, a stop): the send then holds a permit only to give it back unused.
    func acquirePermit(_ lane: Lane, unlessFenced message: (batch: UInt64, message: Int)? = nil) async throws {
        if state.withLock({ $0.tryAcquirePermit(lane) }) { return }
        let id = waitIDs.add(1, ordering: .relaxed).newValue
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let action = state.withLock { state -> SendPermitQueue<CheckedContinuation<Void, any Error>>.EnqueueAction? in
                    // Checked under the lock: a cancellation handler that already ran found nothing to remove.
                    if Task.isCancelled { return nil }
                    return state.waitForPermit(continuation, id: id, lane: lane, unlessFenced: message)
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

    /// Gives back the permit of a send of `lane` that waits to be retried after a refusal (it
    /// takes one again with ``acquirePermit(_:unlessFenced:)`` before its next attempt).
    func releasePermit(_ lane: Lane) {
        resume(state.withLock { $0.releasePermit(lane) })
    }

    /// Takes up to `count` permits free for `lane` now, without waiting; returns how many.
    func tryAcquirePermits(_ lane: Lane, upTo count: Int) -> Int {
        state.withLock { $0.tryAcquirePermits(lane, upTo: count) }
    }

    // MARK: Outcomes

    /// The ledger recorded the outcomes of these claims outside the ledger writer (a channel
    /// command's answer): ends them and wakes their waiters.
    func recorded(_ keys: [Int]) {
        resume(state.withLock { $0.recorded(keys) })
    }

    /// Outcomes answered and not yet recorded.
    var unrecordedOutcomes: Int { read(\.outcomes.unrecordedCount) }

    /// Hands an answered send's outcome to the ledger writer (``recordOutcomes(writing:then:)``)
    /// without waiting, ahead of every bulk one when `urgent`; false once the writer has
    /// stopped (the outcome is then not recorded, and its message must not be acknowledged).
    @discardableResult
    func answered(_ outcome: PendingOutcome, urgent: Bool) -> Bool {
        let answered = state.withLock { $0.outcomes.answered(outcome, urgent: urgent) }
        answered.wake?.resume()
        return answered.accepted
    }

    /// Writes a batch of outcomes, retrying until it is written; returns, for each in order, the
    /// outcome that stands (one recorded earlier stands over a new one). Throws only when cancelled.
    typealias WriteOutcomes = ([PendingOutcome]) async throws(CancellationError) -> [RecordedDelivery]

    /// The ledger writer (group commit): writes the answered outcomes with `write`, a batch at a
    /// time, each as soon as the previous one is written, and hands each written batch to
    /// `recorded` (the outcome that stands for each, with its ticket) concurrently with the next
    /// write. One step ends the written batch's claims and takes the next batch. Runs until
    /// cancelled, then returns once every handed-on batch is done, and refuses outcomes from then on.
    func recordOutcomes(
        writing write: WriteOutcomes,
        then recorded: @escaping @Sendable ([(standing: RecordedDelivery, ticket: EventProcessor.DeliveryTicket)]) async -> Void
    ) async {
        await withDiscardingTaskGroup { group in
            var batch = state.withLock { $0.outcomes.nextBatch() }
            while !Task.isCancelled {
                guard !batch.isEmpty else {
                    guard await waitForOutcomes() else { break }
                    batch = state.withLock { $0.outcomes.nextBatch() }
                    continue
                }
                guard let standing = try? await write(batch) else { break }
                // The tickets alone go on: a copy of each outcome would retain every field again.
                let written = zip(standing, batch).map { (standing: $0, ticket: $1.ticket) }
                group.addTask { await recorded(written) }
                let next = state.withLock { $0.written(claims: batch.compactMap(\.ticket.claim)) }
                resume(next.resume)
                batch = next.next
            }
            state.withLock { $0.outcomes.stop() }
        }
    }

    /// Returns once an outcome is answered (at once when one is queued); false when cancelled.
    private func waitForOutcomes() async -> Bool {
        await withTaskCancellationHandler {
            (try? await withCheckedThrowingContinuation { continuation in
                let registered = state.withLock { state in
                    // Checked under the lock: a cancellation handler that already ran found nothing.
                    !Task.isCancelled && state.outcomes.waitForOutcomes(continuation)
                }
                if !registered { continuation.resume() }
            }) != nil && !Task.isCancelled
        } onCancel: {
            state.withLock { $0.outcomes.cancelWait() }?.resume(throwing: CancellationError())
        }
    }

    /// See ``StateMachine/published(_:)``; returns the indexes of the results that were their
    /// message's last, and whether that message was given up rather than finished.
    func published(_ results: [Machine.PublishedResult]) -> [(index: Int, givenUp: Bool)] {
        let actions = state.withLock { $0.published(results) }
        perform(actions)
        return actions.finished
    }

    /// See ``StateMachine/fenced(batch:message:claim:permit:)``; true when the message has
    /// nothing left outstanding and is given up.
    func fenced(batch: UInt64, message: Int, claim: Int?, permit: Lane?) -> Bool {
        let outcome = state.withLock { $0.fenced(batch: batch, message: message, claim: claim, permit: permit) }
        perform(outcome.actions)
        return outcome.givenUp
    }

    private func perform(_ actions: Machine.Actions) {
        resume(actions.resume)
        for lane in actions.drained { drained[lane]?.signal() }
    }

    private func resume(_ waiters: [CheckedContinuation<Void, any Error>]) {
        for waiter in waiters { waiter.resume() }
    }
}

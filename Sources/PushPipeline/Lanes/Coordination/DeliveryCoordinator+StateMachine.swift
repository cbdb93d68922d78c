import KafkaMessages

extension DeliveryCoordinator {
    /// A message's whole life in this member, for both lanes, as one value: each lane's own part
    /// (``LaneState``: which messages are in flight, the assignment generation each started
    /// under, the fence, the revocation drain, the commit point, the lane's life), the (event,
    /// device) claims, the send permits, the outcomes on their way to the ledger
    /// (``OutcomeQueue``), and the progress of every poll batch towards its messages' last
    /// published result.
    ///
    /// A message is started when polled; its batch is opened with each message's result count;
    /// its devices are claimed (no copy pushes one twice); a permit is taken before a send; the
    /// claim is settled once the outcome is recorded; a published result gives the permit back,
    /// finishes its message when it was the last, moves the commit point and wakes the waiters.
    /// A fenced send gives up claim, permit and message in one event.
    ///
    /// One value for both lanes: the permits are shared (urgent senders first, bulk ones at most
    /// their share), and so are the claims and the ledger writer's queue. Every method is one
    /// decision in one lock section of ``DeliveryCoordinator``, which performs the actions outside
    /// the lock: one owner, so nothing falls between two.
    struct StateMachine<Waiter, Outcome> {
        typealias Claim = DeliveryClaimTable<Waiter>.Claim

        /// The batches with messages still to finish, by ID.
        private var batches: [UInt64: BatchProgress] = [:]
        private var nextBatchID: UInt64 = 0
        private var claims: DeliveryClaimTable<Waiter>
        private var permits: SendPermitQueue<PermitWaiter>
        /// Each lane's own part: its offsets, its life, its consume loop; a lane's member only
        /// ever sees its own lane's partitions.
        private var lanes: [Lane: LaneState<Waiter>] = [.urgent: LaneState(), .bulk: LaneState()]
        /// Sends waiting before their next attempt, by wait ID, woken once their message is fenced.
        private var fenceWaiters: [UInt64: (position: MessagePosition, waiter: Waiter)] = [:]
        /// The outcomes answered and not yet recorded, and the ledger writer.
        var outcomes: OutcomeQueue<Outcome, Waiter>

        /// `permitLimit` sends at once, `bulkShare` of them for bulk senders at most; the last
        /// `recentCapacity` recorded deliveries are remembered for copies of their events; at most
        /// `outcomesPerWrite` outcomes in one ledger write.
        init(permitLimit: Int, bulkShare: Double, recentCapacity: Int, outcomesPerWrite: Int) {
            claims = DeliveryClaimTable(recentCapacity: recentCapacity)
            permits = SendPermitQueue(limit: permitLimit, bulkShare: bulkShare)
            outcomes = OutcomeQueue(maxBatchSize: outcomesPerWrite)
        }

        /// Permits held now.
        var permitsHeld: Int { permits.inUse }

        /// Senders waiting for a permit in `lane` now.
        func waitingForPermit(_ lane: Lane) -> Int { permits.waiting(lane) }

        /// Batches with messages still to finish.
        var openBatches: Int { batches.count }

        /// What only messages in flight hold, by name, zeros left out: a leak once all are finished.
        var heldInFlight: [String: Int] {
            let counts = [
                "send permits": permits.inUse, "open poll batches": batches.count, "claimed sends": claims.sendingCount,
                "claim waiters": claims.waitingCount, "permit waiters": permits.waiting(.urgent) + permits.waiting(.bulk),
                "room waiters": lanes.values.count(where: \.isWaitingForRoom), "fence waiters": fenceWaiters.count,
                "unrecorded outcomes": outcomes.unrecordedCount,
            ]
            return counts.filter { $0.value != 0 }
        }

        // MARK: Offsets

        /// Starts a polled message of `lane`: the assignment generation it starts under, or nil
        /// (nothing recorded) when its partition is not this member's or is being drained, or the
        /// lane is stopping.
        mutating func start(_ message: KafkaMessage, lane: Lane) -> UInt64? {
            lanes[lane]?.start(message)
        }

        /// Whether a message at `position` may no longer start a push attempt here.
        func isFenced(_ position: MessagePosition) -> Bool {
            lanes[position.lane]?.offsets.isFenced(position.partition, generation: position.generation) ?? true
        }

        /// Whether message `message` of `batch` may no longer start a push attempt here.
        func isFenced(batch: UInt64, message: Int) -> Bool {
            guard let position = batches[batch]?.positions[message] else { return true }
            return isFenced(position)
        }

        /// `partitions` now belong to `lane`'s member, each under a new generation.
        mutating func assign(_ partitions: [KafkaTopicPartition], lane: Lane) {
            lanes[lane]?.assign(partitions)
        }

        /// Starts the revocation drain of `partitions` (``OffsetTracker/beginDrain(_:)``);
        /// returns how many of their messages are in flight, and the sends waiting before an
        /// attempt that the fence now ends, to wake.
        mutating func beginDrain(_ partitions: [KafkaTopicPartition], lane: Lane) -> (inFlight: Int, actions: Actions) {
            let inFlight = lanes[lane]?.beginDrain(partitions) ?? 0
            var actions = Actions()
            wakeFencedWaiters(into: &actions)
            return (inFlight, actions)
        }

        /// A graceful stop of `lane`'s member begins: no message starts from now on, and the
        /// consume loop waiting for room is woken to see it. With `givingUpUnstarted` (a paced
        /// campaign) every partition it holds is also drained as if revoked (sends not yet
        /// started are fenced and woken), so the stop waits only for requests in flight; without
        /// it, what was started finishes. Returns the wake-ups.
        mutating func beginStop(_ lane: Lane, givingUpUnstarted: Bool) -> Actions {
            var actions = Actions()
            if let room = lanes[lane]?.beginStop(givingUpUnstarted: givingUpUnstarted) { actions.resume.append(room) }
            wakeFencedWaiters(into: &actions)
            return actions
        }

        /// `lane`'s member left its group: its stop is over.
        mutating func left(_ lane: Lane) { lanes[lane]?.left() }

        /// Where `lane`'s member stands.
        func lifecycle(_ lane: Lane) -> Lifecycle { lanes[lane]?.lifecycle ?? .stopped }

        /// Registers a send of message `message` of `batch` waiting before its next attempt
        /// under wait `id`, until its message is fenced; false (nothing registered) when it is
        /// fenced already.
        mutating func waitForFence(batch: UInt64, message: Int, id: UInt64, _ waiter: Waiter) -> Bool {
            guard let position = batches[batch]?.positions[message], !isFenced(position) else { return false }
            fenceWaiters[id] = (position, waiter)
            return true
        }

        /// Ends the wait `id` (its time is up, or it was cancelled): its waiter when registered.
        mutating func cancelFenceWait(id: UInt64) -> Waiter? {
            fenceWaiters.removeValue(forKey: id)?.waiter
        }

        /// Wakes, in the order they began to wait, the sends whose message is fenced now: those
        /// waiting before an attempt, and those waiting for a permit (handed one to give back).
        private mutating func wakeFencedWaiters(into actions: inout Actions) {
            for id in fenceWaiters.keys.sorted() where isFenced(fenceWaiters[id]!.position) {
                actions.resume.append(fenceWaiters.removeValue(forKey: id)!.waiter)
            }
            let lanes = lanes
            let fenced = permits.grantFenced { waiter in
                waiter.position.map { lanes[$0.lane]?.offsets.isFenced($0.partition, generation: $0.generation) ?? true } ?? false
            }
            actions.resume += fenced.map(\.waiter)
        }

        /// Messages of `partitions` of `lane` in flight.
        func inFlightCount(in partitions: [KafkaTopicPartition], lane: Lane) -> Int {
            lanes[lane]?.offsets.inFlightCount(in: partitions) ?? 0
        }

        /// Messages of `lane` in flight.
        func inFlightCount(_ lane: Lane) -> Int { lanes[lane]?.offsets.inFlightCount ?? 0 }

        /// Partitions assigned to `lane`'s member.
        func assignedCount(_ lane: Lane) -> Int { lanes[lane]?.offsets.assignedCount ?? 0 }

        /// Per partition of `lane`, the offset last committed.
        func committedOffsets(_ lane: Lane) -> [KafkaTopicPartition: Int64] { lanes[lane]?.offsets.committedOffsets ?? [:] }

        /// `lane`'s offsets to commit now (``OffsetTracker/committableOffsets()``).
        func committableOffsets(_ lane: Lane) -> [KafkaTopicPartition: Int64] { lanes[lane]?.offsets.committableOffsets() ?? [:] }

        /// Records a successful commit of `lane`'s offsets.
        mutating func markCommitted(_ committed: [KafkaTopicPartition: Int64], lane: Lane) {
            lanes[lane]?.markCommitted(committed)
        }

        /// Forgets revoked partitions of `lane`; returns the offsets to commit for them before
        /// they go, and the actions the room so made in the window calls for.
        mutating func revoke(_ partitions: [KafkaTopicPartition], lane: Lane) -> (offsets: [KafkaTopicPartition: Int64], actions: Actions) {
            let revoked = lanes[lane]?.revoke(partitions)
            var actions = Actions()
            wakeFencedWaiters(into: &actions)
            if let room = revoked?.room { actions.resume.append(room) }
            return (revoked?.offsets ?? [:], actions)
        }

        /// Every result of the message at `position` is published (a message with no batch:
        /// a token update, a channel command, a dead letter).
        mutating func finish(_ position: MessagePosition) -> Actions {
            var actions = Actions()
            settle(position, givenUp: false, into: &actions)
            return actions
        }

        /// Registers the consume loop of `lane` until at most `atMost` of its messages are in
        /// flight; false (nothing registered) when that is so already.
        mutating func waitForRoom(_ lane: Lane, atMost: Int, _ waiter: Waiter) -> Bool {
            lanes[lane]?.waitForRoom(atMost: atMost, waiter) ?? false
        }

        /// Stops the wait for room in `lane` (its patience ran out, or it was cancelled).
        mutating func cancelRoomWait(_ lane: Lane) -> Waiter? {
            lanes[lane]?.cancelRoomWait()
        }

        private mutating func settle(_ position: MessagePosition, givenUp: Bool, into actions: inout Actions) {
            guard let settled = lanes[position.lane]?.settle(position, givenUp: givenUp) else { return }
            if settled.drainEnded, !actions.drained.contains(position.lane) { actions.drained.append(position.lane) }
            if let room = settled.room { actions.resume.append(room) }
        }

        // MARK: Batches

        /// Opens a batch of the messages at `positions`, whose message `i` publishes `results[i]`
        /// results (none: it is finished at once); returns its ID and what finishing those calls for.
        mutating func openBatch(_ positions: [MessagePosition], results: [Int]) -> (batch: UInt64, actions: Actions) {
            nextBatchID += 1
            var actions = Actions()
            let progress = BatchProgress(positions: positions, pending: results)
            if progress.unfinished > 0 { batches[nextBatchID] = progress }
            for (position, count) in zip(positions, results) where count == 0 {
                settle(position, givenUp: false, into: &actions)
            }
            return (nextBatchID, actions)
        }

        /// A poll batch's lookups are in: opens the batch of the messages at `positions`
        /// (``openBatch(_:results:)``), gives up, unclaimed, the sends of a message fenced
        /// meanwhile, claims every other send's (event, device) key, and, unless `paced`, takes a
        /// permit for the claimed sends in order while one is free for `lane` with nobody waiting
        /// ahead. Returns the batch's ID, each send's step, in the order of `sends`, and the wake-ups.
        mutating func resolved(
            _ positions: [MessagePosition], results: [Int], sends: [(message: Int, claim: Int)], lane: Lane, paced: Bool
        ) -> (batch: UInt64, steps: [SendStep], actions: Actions) {
            var (batch, actions) = openBatch(positions, results: results)
            // Once per message, not per send: a campaign's batch has hundreds of sends.
            let fencedMessages = positions.map(isFenced)
            var permitsFree = !paced
            var steps: [SendStep] = []
            steps.reserveCapacity(sends.count)
            for send in sends {
                guard !fencedMessages[send.message] else {
                    let given = fenced(batch: batch, message: send.message, claim: nil, permit: nil)
                    actions.append(given.actions)
                    steps.append(.fenced(messageGivenUp: given.givenUp))
                    continue
                }
                switch claims.claim(send.claim) {
                case .recordedLately: steps.append(.republish)
                case .busy: steps.append(.waitForClaim)
                case .claimed:
                    permitsFree = permitsFree && permits.tryAcquire(lane)
                    steps.append(permitsFree ? .send : .admit)
                }
            }
            return (batch, steps, actions)
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

        // MARK: Ledger

        /// The ledger recorded the outcomes of these claims: ends them; returns who waited for them.
        mutating func recorded(_ keys: [Int]) -> [Waiter] {
            keys.flatMap { claims.settle($0) }
        }

        /// The ledger writer wrote its last batch, whose sends held the claims `keys`: ends them
        /// (``recorded(_:)``) and takes the writer's next batch (empty: none is queued).
        mutating func written(claims keys: [Int]) -> (resume: [Waiter], next: [Outcome]) {
            (recorded(keys), outcomes.nextBatch())
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
        /// for it now (released in between). A send for message `message` of `batch` is handed
        /// a permit as soon as that message is fenced (at once when it is already): it starts no
        /// request and gives the permit back (``SendPermitQueue/grantFenced(where:)``).
        mutating func waitForPermit(
            _ waiter: Waiter, id: UInt64, lane: Lane, unlessFenced message: (batch: UInt64, message: Int)? = nil
        ) -> SendPermitQueue<Waiter>.EnqueueAction {
            let position = message.flatMap { batches[$0.batch]?.positions[$0.message] }
            if let position, isFenced(position) {
                permits.grantFenced(lane)
                return .resume(waiter)
            }
            switch permits.enqueue(PermitWaiter(waiter: waiter, position: position), id: id, lane: lane) {
            case .resume(let granted): return .resume(granted.waiter)
            case .wait: return .wait
            }
        }

        /// Removes the permit waiter `id` (its task was cancelled); nil when it holds a permit already.
        mutating func cancelPermitWait(id: UInt64) -> Waiter? { permits.cancel(id: id)?.waiter }

        /// A send of `lane` gives its permit back while it waits to be retried; returns the
        /// waiters the permit goes to.
        mutating func releasePermit(_ lane: Lane) -> [Waiter] { permits.release(1, from: lane).map(\.waiter) }

        // MARK: Outcomes

        /// Results were published: gives back the permits their sends held (to the waiters first in
        /// line), counts each against its message, finishes (or gives up) the messages whose last
        /// result it was, and closes the batches that have nothing left. A result of a message
        /// that was abandoned (or of a batch already finished) finishes nothing.
        mutating func published(_ results: [PublishedResult]) -> Actions {
            var actions = Actions()
            var returned: [Lane: Int] = [:]
            for (index, result) in results.enumerated() {
                if let lane = result.permit { returned[lane, default: 0] += 1 }
                // The position alone is read out: a copy of the whole progress would make the
                // publish below copy its arrays.
                guard let position = batches[result.batch]?.positions[result.message],
                    let settled = batches[result.batch]?.publish(result.message)
                else { continue }
                actions.finished.append((index, settled == .givenUp))
                settle(position, givenUp: settled == .givenUp, into: &actions)
                closeIfFinished(result.batch)
            }
            // Urgent first: its waiters are served before bulk ones either way.
            for lane in Lane.allCases {
                if let count = returned[lane] { actions.resume += permits.release(count, from: lane).map(\.waiter) }
            }
            return actions
        }

        /// A send was fenced off (its partition revoked, or being drained, before its next
        /// attempt): ends its claim without an outcome and gives its permit back (nil: it held none
        /// yet). Its message will not finish here: `givenUp` is true when this was the message's
        /// last result outstanding, and the message is then given up (the new owner delivers it).
        mutating func fenced(batch: UInt64, message: Int, claim: Int?, permit: Lane?) -> (actions: Actions, givenUp: Bool) {
            var actions = Actions()
            if let claim { actions.resume += claims.release(claim) }
            if let permit { actions.resume += permits.release(1, from: permit).map(\.waiter) }
            guard let position = batches[batch]?.positions[message], batches[batch]?.fence(message) == .givenUp else { return (actions, false) }
            settle(position, givenUp: true, into: &actions)
            closeIfFinished(batch)
            return (actions, true)
        }

        /// Forgets `batch` once none of its messages is left to finish.
        private mutating func closeIfFinished(_ batch: UInt64) {
            if batches[batch]?.unfinished == 0 { batches[batch] = nil }
        }
    }
}

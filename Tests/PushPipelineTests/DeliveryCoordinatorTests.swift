import KafkaMessages
@testable import PushPipeline
import Synchronization
import Testing

/// The pipeline's coordination of claims, send permits and batch progress: the state machine
/// on its own (waiters are plain integers), including the interleavings that lose a wake-up
/// when two lock sections decide what one should, then the coordinator with real tasks.
@Suite(.timeLimit(.minutes(1)))
struct DeliveryCoordinatorTests {
    typealias Machine = DeliveryCoordinator.StateMachine<Int, Int>
    typealias Published = Machine.PublishedResult

    /// One step answers a poll batch's lookups: each send is claimed, sent with a free permit,
    /// admitted (no permit free, or a paced lane), republished (recorded lately), left to wait
    /// for a copy's claim, or given up unclaimed (its message fenced meanwhile).
    @Test func aResolvedBatchClaimsItsSendsTakesTheFreePermitsInOrderAndGivesUpAFencedMessagesSends() {
        var machine = Machine(permitLimit: 2, bulkShare: 1, recentCapacity: 10, outcomesPerWrite: 2)
        let partitions = [KafkaTopicPartition(topic: "t", partition: 0), KafkaTopicPartition(topic: "t", partition: 1)]
        machine.assign(partitions, lane: .urgent)
        let positions = partitions.map { partition in
            let message = KafkaMessage(topic: "t", partition: partition.partition, offset: 0, key: nil, value: nil)
            return MessagePosition(lane: .urgent, partition: partition, offset: 0, generation: machine.start(message, lane: .urgent)!)
        }
        // Key 5 was recorded lately; keys 6 and 8 are being sent by a copy of their event.
        _ = machine.claim(5)
        _ = machine.recorded([5])
        _ = machine.claim(6)
        _ = machine.claim(8)
        let draining = machine.beginDrain([partitions[1]], lane: .urgent).inFlight
        #expect(draining == 1)

        let resolved = machine.resolved(
            positions, results: [5, 2], sends: [(0, 1), (0, 5), (0, 2), (0, 6), (0, 3), (1, 4), (1, 8)], lane: .urgent, paced: false)
        #expect(resolved.steps == [.send, .republish, .send, .waitForClaim, .admit, .fenced(messageGivenUp: false), .fenced(messageGivenUp: true)])
        #expect(machine.permitsHeld == 2)
        #expect(resolved.actions.drained == [.urgent], "the fenced message was the drained partition's last")
        #expect(machine.claim(4) == .claimed, "a fenced message's send is not claimed")
        #expect(machine.claim(8) == .busy, "nor is the copy's claim on it ended")
        #expect(machine.isFenced(batch: resolved.batch, message: 1))

        // A paced lane takes no permit here: each send waits for its pace first.
        let bulkPartition = KafkaTopicPartition(topic: "b", partition: 0)
        machine.assign([bulkPartition], lane: .bulk)
        let bulkMessage = KafkaMessage(topic: "b", partition: 0, offset: 0, key: nil, value: nil)
        let bulk = MessagePosition(lane: .bulk, partition: bulkPartition, offset: 0, generation: machine.start(bulkMessage, lane: .bulk)!)
        let paced = machine.resolved([bulk], results: [1], sends: [(0, 7)], lane: .bulk, paced: true)
        #expect(paced.steps == [.admit])
        #expect(machine.permitsHeld == 2)
    }

    @Test func aBatchFinishesWithItsLastResultAndItsPermitsGoToTheNextSendersInTheSameStep() {
        var machine = Machine(permitLimit: 2, bulkShare: 1, recentCapacity: 10, outcomesPerWrite: 2)
        let batch = machine.openBatch(start(3, in: &machine), results: [2, 1, 0]).batch
        let answer1 = machine.claim(1)
        #expect(answer1 == .claimed)
        let answer2 = machine.claim(2)
        #expect(answer2 == .claimed)
        let answer3 = machine.claim(2)
        #expect(answer3 == .busy, "a copy of the same delivery waits")
        let granted = [machine.tryAcquirePermit(.urgent), machine.tryAcquirePermit(.urgent)]
        #expect(granted == [true, true])
        guard case .wait = machine.waitForPermit(50, id: 1, lane: .urgent) else {
            Issue.record("a third sender got one of two permits")
            return
        }
        let first = machine.published([Published(batch: batch, message: 0, permit: .urgent)])
        #expect(first.finished.isEmpty, "message 0 has a second result")
        #expect(first.resume == [50], "its permit goes to the waiting sender at once")
        let answer5 = machine.recorded([1, 2])
        #expect(answer5 == [])

        let last = machine.published([
            Published(batch: batch, message: 1, permit: .urgent),
            Published(batch: batch, message: 0, permit: nil),
        ])
        #expect(last.finished.map(\.index) == [0, 1], "both messages finished, in the order given")
        #expect(last.finished.allSatisfy { !$0.givenUp })
        #expect(last.resume.isEmpty, "no task waits for a batch: the state machine closes it")
        #expect(machine.permitsHeld == 1, "the waiter holds the third permit")
        #expect(machine.openBatches == 0)
        let answer6 = machine.claim(1)
        #expect(answer6 == .recordedLately)
    }

    @Test func aBatchWithNothingToPublishIsFinishedAtOnce() {
        var machine = Machine(permitLimit: 1, bulkShare: 1, recentCapacity: 1, outcomesPerWrite: 2)
        let opened = machine.openBatch(start(2, in: &machine), results: [0, 0])
        #expect(opened.actions.resume.isEmpty)
        #expect(machine.openBatches == 0)
    }

    /// A fenced send gives back its claim and permit at once; its message is given up (not
    /// finished) once its other results are settled too, so a delivery of it still in flight is
    /// recorded and published first.
    @Test func aFencedSendGivesBackItsClaimAndPermitAndItsMessageIsGivenUpWhenNothingIsLeft() {
        var machine = Machine(permitLimit: 1, bulkShare: 1, recentCapacity: 10, outcomesPerWrite: 2)
        let batch = machine.openBatch(start(2, in: &machine), results: [2, 1]).batch
        let answer8 = machine.claim(7)
        #expect(answer8 == .claimed)
        let answer9 = machine.claim(7)
        #expect(answer9 == .busy)
        let answer10 = machine.waitForClaim(7, id: 1, 70)
        #expect(answer10, "a copy waits for the claim")
        let answer11 = machine.tryAcquirePermit(.bulk)
        #expect(answer11)
        guard case .wait = machine.waitForPermit(80, id: 2, lane: .urgent) else {
            Issue.record("granted while full")
            return
        }
        let (actions, givenUp) = machine.fenced(batch: batch, message: 0, claim: 7, permit: .bulk)
        #expect(!givenUp, "its other device's result is still to come")
        #expect(actions.resume == [70, 80], "the copy claims again, the permit goes on")
        #expect(actions.finished.isEmpty)
        let answer13 = machine.claim(7)
        #expect(answer13 == .claimed, "released, not remembered as recorded")

        let other = machine.published([Published(batch: batch, message: 0, permit: nil)])
        #expect(other.finished.map(\.index) == [0])
        #expect(other.finished.first?.givenUp == true, "a message with a fenced send is given up, not finished")
        let late = machine.fenced(batch: batch, message: 0, claim: nil, permit: nil)
        #expect(!late.givenUp, "given up once")
        let last = machine.published([Published(batch: batch, message: 1, permit: nil)])
        #expect(last.finished.map(\.index) == [0])
        #expect(last.finished.first?.givenUp == false)
        #expect(machine.openBatches == 0)
        #expect(machine.permitsHeld == 1, "the urgent waiter holds the permit the fenced send gave back")
    }

    /// One owner: the result that is its message's last, published, moves the partition's commit
    /// point, makes room in the lane's window (waking the consume loop) and ends the revocation
    /// drain, in the same step as it gives the permit back; a fenced send's message is given up
    /// in the step that fences it, holding the commit point but not the drain.
    @Test func aMessagesLastResultSettlesItsOffsetWakesTheWindowAndEndsTheDrainInOneStep() throws {
        var machine = Machine(permitLimit: 2, bulkShare: 1, recentCapacity: 10, outcomesPerWrite: 2)
        let partition = KafkaTopicPartition(topic: "t", partition: 0)
        machine.assign([partition], lane: .bulk)
        let messages = (0..<2).map { KafkaMessage(topic: "t", partition: 0, offset: Int64($0), key: nil, value: nil) }
        let generations = messages.compactMap { machine.start($0, lane: .bulk) }
        try #require(generations.count == 2)
        let positions = zip(messages, generations).map { MessagePosition(lane: .bulk, partition: partition, offset: $0.offset, generation: $1) }
        let batch = machine.openBatch(positions, results: [1, 1]).batch
        let permits = machine.tryAcquirePermits(.bulk, upTo: 2)
        #expect(permits == 2)
        let waiting = machine.waitForRoom(.bulk, atMost: 1, 40)
        #expect(waiting, "two in flight, room for one wanted")
        #expect(machine.inFlightCount(.urgent) == 0, "the lanes' offsets are apart")

        let draining = machine.beginDrain([partition], lane: .bulk).inFlight
        #expect(draining == 2)
        #expect(machine.isFenced(batch: batch, message: 0), "the drain fences at once")
        let fenced = machine.fenced(batch: batch, message: 0, claim: nil, permit: .bulk)
        #expect(fenced.givenUp)
        #expect(fenced.actions.resume == [40], "the given-up message makes room at once")
        #expect(fenced.actions.drained.isEmpty, "message 1 is still in flight")
        #expect(machine.committableOffsets(.bulk)[partition] == 0, "a given-up message holds the commit point")

        let last = machine.published([Published(batch: batch, message: 1, permit: .bulk)])
        #expect(last.finished.map(\.index) == [0])
        #expect(last.drained == [.bulk], "the last in-flight message ends the drain")
        #expect(machine.permitsHeld == 0)
        #expect(machine.inFlightCount(.bulk) == 0)
        #expect(machine.committableOffsets(.bulk)[partition] == 0, "still held by the given-up offset 0")
        let revoked = machine.revoke([partition], lane: .bulk)
        #expect(revoked.offsets == [partition: 0], "the new owner reads offset 0 again")
    }

    /// A send waiting for a permit when its partition's drain begins is handed one at once,
    /// though none is free, to give back unused: the drain never waits for permits that other
    /// sends (here, urgent ones) hold. Found by the shipped-pipeline simulation: a bulk
    /// revocation drained for its whole bound while urgent sends held every permit.
    @Test func aSendWaitingForAPermitIsHandedOneWhenItsPartitionIsDrainedAndTheDrainEndsWhenItGivesItBack() throws {
        var machine = Machine(permitLimit: 2, bulkShare: 0.5, recentCapacity: 10, outcomesPerWrite: 2)
        let partition = KafkaTopicPartition(topic: "t", partition: 0)
        machine.assign([partition], lane: .bulk)
        let message = KafkaMessage(topic: "t", partition: 0, offset: 0, key: nil, value: nil)
        let started = machine.start(message, lane: .bulk)
        let generation = try #require(started)
        let position = MessagePosition(lane: .bulk, partition: partition, offset: 0, generation: generation)
        // Two devices: two sends of the message.
        let batch = machine.openBatch([position], results: [2]).batch
        let urgentHeld = machine.tryAcquirePermits(.urgent, upTo: 2)
        #expect(urgentHeld == 2, "urgent sends hold every permit")
        guard case .wait = machine.waitForPermit(60, id: 1, lane: .bulk, unlessFenced: (batch, 0)) else {
            Issue.record("granted while full")
            return
        }
        guard case .wait = machine.waitForPermit(61, id: 2, lane: .bulk) else {
            Issue.record("granted while full")
            return
        }

        let drain = machine.beginDrain([partition], lane: .bulk)
        #expect(drain.inFlight == 1)
        #expect(drain.actions.resume == [60], "the fenced send is woken holding a permit; the wait no fence ends stays")
        #expect(machine.permitsHeld == 3, "one above the limit until it gives it back")
        // The second send, fenced already when it registers: handed a permit at once.
        guard case .resume(62) = machine.waitForPermit(62, id: 3, lane: .bulk, unlessFenced: (batch, 0)) else {
            Issue.record("a fenced send waited for a permit")
            return
        }
        let first = machine.fenced(batch: batch, message: 0, claim: nil, permit: .bulk)
        #expect(!first.givenUp)
        let second = machine.fenced(batch: batch, message: 0, claim: nil, permit: .bulk)
        #expect(second.givenUp)
        #expect(second.actions.drained == [.bulk], "the drain ends with the last of them")
        #expect(machine.permitsHeld == 2)
        let bulkGranted = machine.tryAcquirePermit(.bulk)
        #expect(!bulkGranted, "no permit is free: the urgent sends still hold both")
    }

    /// The lost wake-ups: each time, what the waiter waits for happens between its "not yet"
    /// and its registration; the registration sees it and the caller goes on at once.
    @Test func whatHappensBetweenNotYetAndWaitingIsNeverLost() {
        var machine = Machine(permitLimit: 1, bulkShare: 1, recentCapacity: 10, outcomesPerWrite: 2)
        let batch = machine.openBatch(start(1, in: &machine), results: [1]).batch
        let answer15 = machine.claim(3)
        #expect(answer15 == .claimed)
        let answer16 = machine.tryAcquirePermit(.urgent)
        #expect(answer16)

        // A second sender finds no permit...
        let answer17 = machine.tryAcquirePermit(.urgent)
        #expect(!answer17)
        // ...the first result is published (its permit comes back, nobody waits yet)...
        let published = machine.published([Published(batch: batch, message: 0, permit: .urgent)])
        #expect(published.resume == [])
        // ...and the second sender, registering, is granted the permit.
        guard case .resume(let sender) = machine.waitForPermit(5, id: 1, lane: .urgent) else {
            Issue.record("the sender was parked although a permit was free")
            return
        }
        #expect(sender == 5)
        #expect(machine.permitsHeld == 1)

        #expect(machine.openBatches == 0, "its last result closed the batch")

        // A copy finds the claim busy, the outcome is recorded, then the copy registers: refused.
        let answer19 = machine.claim(4)
        #expect(answer19 == .claimed)
        let answer20 = machine.claim(4)
        #expect(answer20 == .busy)
        let answer21 = machine.recorded([4])
        #expect(answer21 == [])
        let answer22 = machine.waitForClaim(4, id: 2, 7)
        #expect(!answer22)
        let answer23 = machine.claim(4)
        #expect(answer23 == .recordedLately)
    }

    /// Random interleavings of whole notifications (claim, permit, publish; some fenced) over
    /// several batches and both lanes: no more permits than the limit are held, every waiter is
    /// resumed exactly once, every message ends exactly once (given up when a send of it was
    /// fenced, finished otherwise), and at the end every permit is back and every batch closed.
    @Test(arguments: 1...20) func randomInterleavingsFinishEveryMessageOnceAndReturnEveryPermit(seed: UInt64) {
        var random = SplitMix(seed: seed)
        let limit = Int(random.next() % 4) + 1
        var machine = Machine(permitLimit: limit, bulkShare: seed.isMultiple(of: 2) ? 0.5 : 1, recentCapacity: 100, outcomesPerWrite: 2)

        struct Send {
            var batch: UInt64
            var message: Int
            var lane: InputLane.Priority
        }
        var messageResults: [UInt64: [Int]] = [:]
        var toAdmit: [Send] = []
        var waitingForPermit: [Int: Send] = [:]
        var sending: [Send] = []
        var finished: Set<[UInt64]> = []
        var givenUp: Set<[UInt64]> = []
        var fencedMessages: Set<[UInt64]> = []
        var nextWaiter = 0

        for _ in 0..<6 {
            let results = (0..<Int(random.next() % 4) + 1).map { _ in Int(random.next() % 3) + 1 }
            let lane: InputLane.Priority = random.next() % 2 == 0 ? .urgent : .bulk
            let batch = machine.openBatch(start(results.count, in: &machine, lane: lane), results: results).batch
            messageResults[batch] = results
            for (message, count) in results.enumerated() {
                toAdmit += Array(repeating: Send(batch: batch, message: message, lane: lane), count: count)
            }
        }
        toAdmit.shuffle(using: &random)

        func resume(_ actions: Machine.Actions, published: [Send]) {
            for (index, wasGivenUp) in actions.finished {
                let key = [published[index].batch, UInt64(published[index].message)]
                #expect(wasGivenUp == fencedMessages.contains(key), "given up exactly when a send of it was fenced")
                let first = wasGivenUp ? givenUp.insert(key).inserted : finished.insert(key).inserted
                #expect(first, "ended twice")
            }
            grant(actions.resume)
        }
        func grant(_ waiters: [Int]) {
            for waiter in waiters {
                let send = waitingForPermit.removeValue(forKey: waiter)
                #expect(send != nil, "resumed twice, or never registered")
                if let send { sending.append(send) }
            }
        }

        while !toAdmit.isEmpty || !sending.isEmpty || !waitingForPermit.isEmpty {
            if !toAdmit.isEmpty, sending.isEmpty || random.next() % 2 == 0 {
                let send = toAdmit.removeLast()
                if machine.tryAcquirePermit(send.lane) {
                    sending.append(send)
                } else {
                    nextWaiter += 1
                    switch machine.waitForPermit(nextWaiter, id: UInt64(nextWaiter), lane: send.lane) {
                    case .resume: sending.append(send)
                    case .wait: waitingForPermit[nextWaiter] = send
                    }
                }
            } else if !sending.isEmpty {
                let count = Int(random.next() % UInt64(sending.count)) + 1
                let done = Array(sending.suffix(count))
                sending.removeLast(count)
                if random.next() % 10 == 0, let fenced = done.first {
                    let key = [fenced.batch, UInt64(fenced.message)]
                    fencedMessages.insert(key)
                    let (actions, last) = machine.fenced(batch: fenced.batch, message: fenced.message, claim: nil, permit: fenced.lane)
                    if last { #expect(givenUp.insert(key).inserted, "given up twice") }
                    resume(actions, published: [])
                    let rest = Array(done.dropFirst())
                    resume(machine.published(rest.map { Published(batch: $0.batch, message: $0.message, permit: $0.lane) }), published: rest)
                } else {
                    resume(machine.published(done.map { Published(batch: $0.batch, message: $0.message, permit: $0.lane) }), published: done)
                }
            } else {
                Issue.record("senders wait while nobody sends: a lost wake-up")
                break
            }
            #expect(machine.permitsHeld == sending.count)
            #expect(machine.permitsHeld <= limit)
        }
        #expect(machine.permitsHeld == 0)
        #expect(machine.openBatches == 0)
        let everyMessage = Set(messageResults.flatMap { batch, results in results.indices.map { [batch, UInt64($0)] } })
        #expect(finished.union(givenUp) == everyMessage)
        #expect(finished.isDisjoint(with: givenUp))
    }

    /// A graceful stop: nothing polled from then on starts, and the consume loop waiting for room
    /// is woken to see it; the bulk lane's sends not yet started are fenced (given up for the
    /// next owner), the urgent lane's started messages finish.
    @Test func aStopStartsNothingMoreWakesTheConsumeLoopAndGivesUpOnlyTheCampaignsUnstartedSends() {
        var machine = Machine(permitLimit: 2, bulkShare: 1, recentCapacity: 10, outcomesPerWrite: 2)
        let partition = KafkaTopicPartition(topic: "t", partition: 0)
        machine.assign([partition], lane: .urgent)
        machine.assign([partition], lane: .bulk)
        let urgent = start(2, in: &machine, lane: .urgent)
        let bulk = start(1, in: &machine, lane: .bulk)
        let waits = machine.waitForRoom(.urgent, atMost: 1, 40)
        #expect(waits)

        let stopping = machine.beginStop(.urgent, givingUpUnstarted: false)
        #expect(stopping.resume == [40], "the consume loop wakes to see the stop")
        #expect(machine.lifecycle(.urgent) == .stopping)
        #expect(!machine.isFenced(urgent[0]), "what the urgent lane started finishes")
        let polledLate = KafkaMessage(topic: "t", partition: 0, offset: nextOffset.add(1, ordering: .relaxed).newValue, key: nil, value: nil)
        #expect(machine.start(polledLate, lane: .urgent) == nil, "a message polled after the stop began is the next owner's")
        #expect(machine.lifecycle(.bulk) == .running)

        _ = machine.beginStop(.bulk, givingUpUnstarted: true)
        #expect(machine.isFenced(bulk[0]), "the campaign's unstarted sends are given up")
        machine.left(.urgent)
        #expect(machine.lifecycle(.urgent) == .stopped)
    }

    @Test func everyTaskGetsAPermitAndAllAreReturned() async throws {
        let coordinator = DeliveryCoordinator(permitLimit: 3, bulkShare: 0.5)
        let maximum = Concurrent()
        await withTaskGroup(of: Void.self) { group in
            for index in 0..<400 {
                group.addTask {
                    let lane: InputLane.Priority = index.isMultiple(of: 3) ? .bulk : .urgent
                    try? await coordinator.acquirePermit(lane)
                    maximum.state.withLock { state in
                        state.now += 1
                        state.highest = max(state.highest, state.now)
                    }
                    await Task.yield()
                    maximum.state.withLock { $0.now -= 1 }
                    _ = coordinator.published([.init(batch: 0, message: 0, permit: lane)])
                }
            }
        }
        #expect(coordinator.permitsHeld == 0)
        #expect(maximum.state.withLock { $0.highest } <= 3)
    }

    @Test func cancellingAWaitingAcquireThrowsAndKeepsThePermitCount() async throws {
        let coordinator = DeliveryCoordinator(permitLimit: 1)
        try await coordinator.acquirePermit(.urgent)
        await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await coordinator.acquirePermit(.bulk) }
            while coordinator.waitingForPermit(.bulk) == 0 { await Task.yield() }
            group.cancelAll()
            await #expect(throws: CancellationError.self) { try await group.next() }
        }
        #expect(coordinator.waitingForPermit(.bulk) == 0)
        _ = coordinator.published([.init(batch: 0, message: 0, permit: .urgent)])
        #expect(coordinator.permitsHeld == 0)
    }

    @Test func theLastResultPublishedFromAnyTaskClosesTheBatchOnce() async {
        let coordinator = DeliveryCoordinator(permitLimit: 4)
        let (batch, steps) = coordinator.resolved(
            started(2, in: coordinator), results: [1, 2], sends: [(0, 11), (1, 12), (1, 13)], lane: .urgent, paced: false)
        #expect(steps == [.send, .send, .send])
        #expect(coordinator.permitsHeld == 3)
        await withTaskGroup(of: [(index: Int, givenUp: Bool)].self) { group in
            group.addTask { coordinator.published([.init(batch: batch, message: 1, permit: .urgent)]) }
            group.addTask { coordinator.published([.init(batch: batch, message: 0, permit: .urgent)]) }
            group.addTask { coordinator.published([.init(batch: batch, message: 1, permit: .urgent)]) }
            let finished = await group.reduce(0) { $0 + $1.count }
            #expect(finished == 2)
        }
        #expect(coordinator.openBatches == 0)
        #expect(coordinator.permitsHeld == 0)
    }
}

/// Offsets for the messages the tests start, unique in the process.
private let nextOffset = Atomic<Int64>(0)

/// Starts `count` messages of `lane` in `machine` (partition 0 of topic `t`, fresh offsets);
/// returns their positions.
private func start(_ count: Int, in machine: inout DeliveryCoordinator.StateMachine<Int, Int>, lane: InputLane.Priority = .urgent) -> [MessagePosition] {
    (0..<count).map { _ in
        let message = KafkaMessage(topic: "t", partition: 0, offset: nextOffset.add(1, ordering: .relaxed).newValue, key: nil, value: nil)
        let generation = machine.start(message, lane: lane)!
        return MessagePosition(lane: lane, partition: message.topicPartition, offset: message.offset, generation: generation)
    }
}

/// Starts `count` urgent messages in `coordinator`.
private func started(_ count: Int, in coordinator: DeliveryCoordinator) -> [StartedMessage] {
    (0..<count).map { _ in
        let message = KafkaMessage(topic: "t", partition: 0, offset: nextOffset.add(1, ordering: .relaxed).newValue, key: nil, value: nil)
        return coordinator.start([message], lane: .urgent, polledAtMilliseconds: 0)[0]
    }
}

/// How many tasks hold a permit now, and the most that ever did at once.
private final class Concurrent: Sendable {
    let state = Mutex((now: 0, highest: 0))
}

import PushStores
import Foundation
import KafkaMessages
import Testing

@testable import PushPipeline

/// A deterministic simulation of the delivery guarantee: two Herald instances, each with the real
/// ``DeliveryCoordinator/StateMachine`` (both lanes' offsets and fences, claims, permits, batch
/// progress), on a virtual clock driven by a seeded scheduler. Around them, simulated:
/// - the broker: three partitions (two on the bulk topic, one on the urgent one) moved to the same
///   or the other instance (drain with its bound, commit on revocation, assignment under a new
///   generation), redelivery from the committed offset, commits refused from non-owners;
/// - crashes: an instance dies at once (its partitions go to the other after a session time-out)
///   and restarts empty;
/// - APNs: 200, 410, 429/503 retried after a backoff (the permit held), GOAWAY (the stream never
///   opened: retried at once, nothing pushed), time-outs (retried; counted as not delivered);
/// - PostgreSQL: a ledger lookup before a message's first sends only (never before a retry),
///   ledger writes that fail or time out (and may have landed), retried;
/// - time: the clock starts just before UTC midnight, and a quarter of the records carry no
///   timestamp (their ledger day is the day they are polled).
///
/// After every step it checks what that step could break:
/// - no device is pushed twice, except one pushed and not recorded when its instance crashed or
///   when a drain's bound ran out (at most HERALD_MAX_CONCURRENT_SENDS per crash);
/// - an offset is committed only once every result of every message below it is published;
/// - no more permits are held than the limit;
/// and at quiescence: every device of every message has a published result, and the live
/// instances hold no permit and no open batch.
///
/// A failing seed replays exactly: `HERALD_SIMULATION_SEED=<seed> swift test --filter LaneSimulation`
/// runs that seed alone (add `HERALD_SIMULATION_TRACE=1` for every step of it);
/// `HERALD_SIMULATION_SEEDS=<n>` runs n seeds (the test command runs 2,000).
@Suite struct LaneSimulationTests {
    @Test func noDevicePushedTwiceAndNoOffsetCommittedEarlyUnderRebalancesCrashesAndFailures() {
        let environment = ProcessInfo.processInfo.environment
        let seeds: [UInt64] =
            if let seed = environment["HERALD_SIMULATION_SEED"].flatMap(UInt64.init) {
                [seed]
            } else {
                Array(1...UInt64(environment["HERALD_SIMULATION_SEEDS"].flatMap(Int.init) ?? 2_000))
            }
        for seed in seeds {
            var simulation = LaneSimulation(seed: seed)
            if let violation = simulation.run() {
                // The run's last steps but polls and commits, to read what led there (every step
                // with HERALD_SIMULATION_TRACE=1).
                let steps =
                    environment["HERALD_SIMULATION_TRACE"] == "1"
                    ? simulation.steps.joined(separator: "\n")
                    : simulation.steps.filter { !$0.contains("poll(") && !$0.contains("commit(") }.suffix(60).joined(separator: "\n")
                Issue.record("seed \(seed): \(violation) (replay: HERALD_SIMULATION_SEED=\(seed)); its last steps:\n\(steps)")
                return
            }
        }
    }
}

/// One run of the simulation; see ``LaneSimulationTests``.
struct LaneSimulation {
    typealias Machine = DeliveryCoordinator.StateMachine<Int>
    typealias Lane = InputLane.Priority

    /// A device of a message (device 0 also names the message).
    struct Delivery: Hashable, CustomStringConvertible {
        var partition: Int32
        var offset: Int64
        var device: Int

        var message: Delivery { Delivery(partition: partition, offset: offset, device: 0) }
        var description: String { "p\(partition)@\(offset)/d\(device)" }
    }

    /// A ledger row's key: the device and the UTC day its record was given.
    struct LedgerKey: Hashable {
        var delivery: Delivery
        var day: Int32
    }

    /// One device's send in one instance's life.
    struct Send {
        var instance: Int
        var life: Int
        var delivery: Delivery
        var batch: UInt64
        var lane: Lane
        var day: Int32
        /// Whether it holds a permit (from its admission until its result is published).
        var holdsPermit = false
    }

    enum Event {
        case poll(instance: Int)
        /// A message's ledger lookup answered: its sends start.
        case lookedUp(instance: Int, life: Int, message: Delivery, position: MessagePosition, day: Int32)
        case attempt(send: Int)
        case write(send: Int)
        case published(send: Int)
        /// A result republished from the ledger (no send, no permit).
        case republished(instance: Int, life: Int, delivery: Delivery, batch: UInt64)
        /// A copy waiting for a claim claims again.
        case claimAgain(send: Int)
        case commit(instance: Int)
        /// Starts moving a partition: its owner drains it, then it goes to `to`.
        case rebalance(partition: Int32, to: Int)
        case revoked(partition: Int32, move: Int)
        case crash(instance: Int)
        /// The group gives a crashed instance's partitions to `to` (its session timed out).
        case takeOver(partitions: [Int32], to: Int)
        case restart(instance: Int)
    }

    struct Instance {
        var machine: Machine
        var alive = true
        /// Bumped by each crash: events of an earlier life are ignored.
        var life = 0
        /// The next offset to poll, per assigned partition.
        var positions: [Int32: Int64] = [:]
    }

    static let partitions: [Int32] = [0, 1, 2]
    static let messagesPerPartition: Int64 = 12
    static let permitLimit = 4
    /// How long a revocation waits for the partition's messages (HERALD_REVOCATION_DRAIN_TIMEOUT).
    static let drainBound: Int64 = 2_000
    /// 2.5 s before a UTC midnight, in milliseconds since 1970.
    static let clockStart: Int64 = 20_000 * 86_400_000 - 2_500

    static func lane(of partition: Int32) -> Lane { partition == 2 ? .urgent : .bulk }
    static func topic(of partition: Int32) -> String { partition == 2 ? "push.requests" : "push.requests.bulk" }
    static func topicPartition(_ partition: Int32) -> KafkaTopicPartition {
        KafkaTopicPartition(topic: topic(of: partition), partition: partition)
    }

    /// Seeded (SendPermitQueueTests' generator), so a seed replays the same run on every machine.
    private var random: SplitMix
    private var now: Int64 = 0  // virtual milliseconds since the start
    /// The first invariant broken, when one is.
    private var violation: String?
    private var queue: [(time: Int64, sequence: Int, event: Event)] = []
    private var instances: [Instance]
    private var owner: [Int32: Int] = [:]
    /// Partitions being moved: drained by `from`, then assigned to `to`.
    private var moving: [Int32: (from: Int, to: Int, id: Int)] = [:]
    private var moves = 0
    private var committed: [Int32: Int64] = [:]
    /// Per message, its device count and whether its record has a timestamp.
    private var messages: [Delivery: (devices: Int, timed: Bool)] = [:]
    private var sends: [Int: Send] = [:]
    private var nextSend = 0
    private var ledger: Set<LedgerKey> = []
    private var pushes: [Delivery: Int] = [:]
    /// Pushed and not yet recorded, by the instance (and life) that pushed them.
    private var unrecorded: [Delivery: (instance: Int, life: Int)] = [:]
    /// Repeats a crash or a drain's bound allows: one more push each.
    private var allowedRepeats: [Delivery: Int] = [:]
    private var published: [Delivery: Int] = [:]

    init(seed: UInt64) {
        random = SplitMix(seed: seed)
        instances = (0..<2).map { _ in Instance(machine: Machine(permitLimit: Self.permitLimit, bulkShare: 0.75, recentCapacity: 64)) }
        for partition in Self.partitions {
            for offset in 0..<Self.messagesPerPartition {
                let message = Delivery(partition: partition, offset: offset, device: 0)
                messages[message] = (Int.random(in: 1...3, using: &random), Int.random(in: 0..<4, using: &random) != 0)
            }
            let instance = Int.random(in: 0...1, using: &random)
            owner[partition] = instance
            assign(partition, to: instance)
        }
        for instance in instances.indices {
            schedule(.poll(instance: instance), after: 0)
            schedule(.commit(instance: instance), after: 250)
        }
        for _ in 0..<Int.random(in: 2...6, using: &random) {
            let partition = Self.partitions.randomElement(using: &random)!
            schedule(.rebalance(partition: partition, to: Int.random(in: 0...1, using: &random)), after: Int64.random(in: 0...6_000, using: &random))
        }
        if Int.random(in: 0..<3, using: &random) == 0 {
            schedule(.crash(instance: Int.random(in: 0...1, using: &random)), after: Int64.random(in: 100...5_000, using: &random))
        }
    }

    /// Every step taken, as text (the end of it is shown for a failing seed).
    private(set) var steps: [String] = []

    /// Runs to quiescence; returns the first invariant broken, or nil.
    mutating func run() -> String? {
        // The queue is kept latest first: the next event is its last element.
        while let next = queue.popLast(), now < 180_000 {
            now = next.time
            steps.append("\(now) ms: \(next.event)")
            step(next.event)
            if let violation { return "at \(now) ms: \(violation)" }
            for instance in instances where instance.machine.permitsHeld > Self.permitLimit {
                return "at \(now) ms: \(instance.machine.permitsHeld) permits held, the limit is \(Self.permitLimit)"
            }
        }
        return checkQuiescence()
    }

    private var isDone: Bool {
        Self.partitions.allSatisfy { committed[$0] == Self.messagesPerPartition }
    }

    /// Adds `event` at `now + delay`; events due at the same time run in a seeded order.
    private mutating func schedule(_ event: Event, after delay: Int64) {
        let entry = (time: now + delay, sequence: Int.random(in: 0..<Int.max, using: &random), event: event)
        var low = 0
        var high = queue.count
        while low < high {
            let middle = (low + high) / 2
            if (queue[middle].time, queue[middle].sequence) > (entry.time, entry.sequence) { low = middle + 1 } else { high = middle }
        }
        queue.insert(entry, at: low)
    }

    private mutating func assign(_ partition: Int32, to instance: Int) {
        instances[instance].machine.assign([Self.topicPartition(partition)], lane: Self.lane(of: partition))
        instances[instance].positions[partition] = committed[partition] ?? 0
    }

    private func isCurrent(_ instance: Int, _ life: Int) -> Bool {
        instances[instance].alive && instances[instance].life == life
    }

    private mutating func step(_ event: Event) {
        switch event {
        case .poll(let instance):
            if instances[instance].alive { poll(instance) }
            if !isDone { schedule(.poll(instance: instance), after: Int64.random(in: 5...50, using: &random)) }
        case .lookedUp(let instance, let life, let message, let position, let day):
            if isCurrent(instance, life) { start(message, position: position, day: day, in: instance) }
        case .attempt(let id):
            attempt(id)
        case .write(let id):
            write(id)
        case .published(let id):
            guard let send = sends[id], isCurrent(send.instance, send.life) else { return }
            sends[id] = nil
            published[send.delivery, default: 0] += 1
            let actions = instances[send.instance].machine.published([.init(batch: send.batch, message: 0, permit: send.lane)])
            perform(actions, in: send.instance)
        case .republished(let instance, let life, let delivery, let batch):
            guard isCurrent(instance, life) else { return }
            published[delivery, default: 0] += 1
            perform(instances[instance].machine.published([.init(batch: batch, message: 0, permit: nil)]), in: instance)
        case .claimAgain(let id):
            guard let send = sends[id], isCurrent(send.instance, send.life) else { return }
            claim(id)
        case .commit(let instance):
            if instances[instance].alive {
                for lane in Lane.allCases { commit(instances[instance].machine.committableOffsets(lane), lane: lane, by: instance) }
            }
            if !isDone { schedule(.commit(instance: instance), after: 250) }
        case .rebalance(let partition, let to):
            guard let from = owner[partition] else { return }
            owner[partition] = nil
            moves += 1
            moving[partition] = (from, to, moves)
            let left = instances[from].machine.beginDrain([Self.topicPartition(partition)], lane: Self.lane(of: partition)).inFlight
            // The drain ends when its last message settles (see `perform`), or at its bound, when
            // the partition goes with whatever is left.
            schedule(.revoked(partition: partition, move: moves), after: left == 0 ? 0 : Self.drainBound)
        case .revoked(let partition, let move):
            // Once per move: the drain's end and its bound both schedule it.
            guard let (from, to, id) = moving[partition], id == move else { return }
            let lane = Self.lane(of: partition)
            let offsets = instances[from].machine.revoke([Self.topicPartition(partition)], lane: lane).offsets
            commit(offsets, lane: lane, by: from)
            moving[partition] = nil
            instances[from].positions[partition] = nil
            // Past the drain's bound, what it pushed and has not recorded may be pushed again.
            allowRepeats { $0.instance == from && $1.partition == partition }
            let next = instances[to].alive ? to : 1 - to
            owner[partition] = next
            assign(partition, to: next)
        case .crash(let instance):
            crash(instance)
        case .takeOver(let partitions, let to):
            let next = instances[to].alive ? to : 1 - to
            for partition in partitions where owner[partition] == nil && moving[partition] == nil {
                owner[partition] = next
                assign(partition, to: next)
            }
        case .restart(let instance):
            instances[instance].alive = true
        }
    }

    private mutating func commit(_ offsets: [KafkaTopicPartition: Int64], lane: Lane, by instance: Int) {
        for (topicPartition, offset) in offsets {
            // The broker refuses a commit from a member that no longer owns the partition... unless
            // it is the commit on revocation, made while it still does (owner nil: being moved).
            let current = owner[topicPartition.partition]
            guard current == instance || (current == nil && moving[topicPartition.partition]?.from == instance) else {
                steps.append("  instance \(instance)'s commit of p\(topicPartition.partition)@\(offset) refused: not its partition")
                continue
            }
            if committed[topicPartition.partition] != offset { steps.append("  p\(topicPartition.partition) committed at \(offset) by \(instance)") }
            committed[topicPartition.partition] = offset
            for below in 0..<offset {
                let message = Delivery(partition: topicPartition.partition, offset: below, device: 0)
                for device in 0..<messages[message]!.devices where published[Delivery(partition: message.partition, offset: below, device: device)] == nil {
                    let unpublished = Delivery(partition: message.partition, offset: below, device: device)
                    violation = violation ?? "offset \(offset) of p\(message.partition) committed before the result of \(unpublished) was published"
                }
            }
        }
        instances[instance].machine.markCommitted(offsets, lane: lane)
    }

    private mutating func poll(_ instance: Int) {
        // Sorted: a dictionary's order differs from process to process, a seed's run must not.
        let pollable = instances[instance].positions.filter { $0.value < Self.messagesPerPartition }.sorted { $0.key < $1.key }
        guard let (partition, offset) = pollable.randomElement(using: &random) else { return }
        let message = Delivery(partition: partition, offset: offset, device: 0)
        let record = KafkaMessage(topic: Self.topic(of: partition), partition: partition, offset: offset, key: nil, value: nil)
        let lane = Self.lane(of: partition)
        guard let generation = instances[instance].machine.start(record, lane: lane) else { return }
        instances[instance].positions[partition] = offset + 1
        // The ledger day, decided once when polled: the record's (produced before the run), or the poll's.
        let day = LedgerEvent.day(ofMilliseconds: messages[message]!.timed ? Self.clockStart - 60_000 : Self.clockStart + now)
        let position = MessagePosition(lane: lane, partition: record.topicPartition, offset: offset, generation: generation)
        schedule(
            .lookedUp(instance: instance, life: instances[instance].life, message: message, position: position, day: day),
            after: Int64.random(in: 1...20, using: &random) + (Int.random(in: 0..<20, using: &random) == 0 ? 1_000 : 0)
        )
    }

    /// The ledger answered: republishes what it recorded, claims and admits the rest.
    private mutating func start(_ message: Delivery, position: MessagePosition, day: Int32, in instance: Int) {
        let count = messages[message]!.devices
        let batch = instances[instance].machine.openBatch([position], results: [count]).batch
        for device in 0..<count {
            let delivery = Delivery(partition: message.partition, offset: message.offset, device: device)
            if isRecorded(delivery, day: day) {
                let republish = Event.republished(instance: instance, life: instances[instance].life, delivery: delivery, batch: batch)
                schedule(republish, after: Int64.random(in: 1...10, using: &random))
                continue
            }
            nextSend += 1
            sends[nextSend] = Send(instance: instance, life: instances[instance].life, delivery: delivery, batch: batch, lane: position.lane, day: day)
            claim(nextSend)
        }
    }

    /// A send's claim on its (event, device): one copy sends, a copy finding it busy waits.
    private mutating func claim(_ id: Int) {
        let send = sends[id]!
        let key = claimKey(send)
        switch instances[send.instance].machine.claim(key) {
        case .claimed:
            admit(id)
        case .busy:
            if !instances[send.instance].machine.waitForClaim(key, id: UInt64(id), -id) { schedule(.claimAgain(send: id), after: 0) }
        case .recordedLately:
            // Herald asks the ledger again: republished when recorded, otherwise sent.
            if isRecorded(send.delivery, day: send.day) {
                sends[id] = nil
                schedule(.republished(instance: send.instance, life: send.life, delivery: send.delivery, batch: send.batch), after: 5)
            } else if instances[send.instance].machine.claimSending(key) == .claimed {
                admit(id)
            } else {
                schedule(.claimAgain(send: id), after: 1)
            }
        }
    }

    /// Whether a lookup finds the delivery's outcome, as Herald looks: under the message's ledger
    /// day, and for a record without a timestamp also under the day before
    /// (``StartedMessage/ledgerDays``).
    private func isRecorded(_ delivery: Delivery, day: Int32) -> Bool {
        ledger.contains(LedgerKey(delivery: delivery, day: day))
            || (!messages[delivery.message]!.timed && ledger.contains(LedgerKey(delivery: delivery, day: day - 1)))
    }

    private func claimKey(_ send: Send) -> Int {
        Int(send.delivery.partition) * 1_000_000 + Int(send.delivery.offset) * 10 + send.delivery.device
    }

    /// Takes a permit for the send (or waits in its lane's queue); a fenced send takes none.
    private mutating func admit(_ id: Int) {
        let send = sends[id]!
        if instances[send.instance].machine.isFenced(batch: send.batch, message: 0) { return fence(id) }
        if instances[send.instance].machine.tryAcquirePermit(send.lane) {
            sends[id]?.holdsPermit = true
            schedule(.attempt(send: id), after: 0)
            return
        }
        switch instances[send.instance].machine.waitForPermit(id, id: UInt64(id), lane: send.lane) {
        case .resume:
            sends[id]?.holdsPermit = true
            schedule(.attempt(send: id), after: 0)
        case .wait: break
        }
    }

    private mutating func fence(_ id: Int) {
        guard let send = sends.removeValue(forKey: id) else { return }
        let outcome = instances[send.instance].machine.fenced(
            batch: send.batch,
            message: 0,
            claim: claimKey(send),
            permit: send.holdsPermit ? send.lane : nil
        )
        perform(outcome.actions, in: send.instance)
    }

    private mutating func attempt(_ id: Int) {
        guard let send = sends[id], isCurrent(send.instance, send.life) else { return }
        if instances[send.instance].machine.isFenced(batch: send.batch, message: 0) { return fence(id) }
        switch Int.random(in: 0..<100, using: &random) {
        case 0..<70:  // 200 or 410: pushed.
            pushes[send.delivery, default: 0] += 1
            if pushes[send.delivery]! > 1 + (allowedRepeats[send.delivery] ?? 0) {
                violation = violation ?? "\(send.delivery) pushed \(pushes[send.delivery]!) times, \(allowedRepeats[send.delivery] ?? 0) repeats allowed"
            }
            unrecorded[send.delivery] = (send.instance, send.life)
            schedule(.write(send: id), after: Int64.random(in: 1...15, using: &random))
        case 70..<85:  // 429 or 503: retried after a backoff, without reading the ledger again.
            schedule(.attempt(send: id), after: Int64.random(in: 100...3_000, using: &random))
        case 85..<92:  // GOAWAY above the stream's ID: never opened, retried at once.
            schedule(.attempt(send: id), after: Int64.random(in: 0...5, using: &random))
        default:  // No answer within the request time-out: retried (counted as not delivered).
            schedule(.attempt(send: id), after: 1_000)
        }
    }

    /// The ledger write of a pushed send; failures and time-outs are retried.
    private mutating func write(_ id: Int) {
        guard let send = sends[id], isCurrent(send.instance, send.life) else { return }
        let key = LedgerKey(delivery: send.delivery, day: send.day)
        switch Int.random(in: 0..<100, using: &random) {
        case 0..<8:  // Failed: retried after a backoff.
            schedule(.write(send: id), after: Int64.random(in: 50...2_500, using: &random))
        case 8..<12:  // Timed out: it may have landed; retried (the write is idempotent).
            if Bool.random(using: &random) { ledger.insert(key) }
            schedule(.write(send: id), after: Int64.random(in: 100...1_000, using: &random))
        default:
            ledger.insert(key)
            unrecorded[send.delivery] = nil
            perform(.init(resume: instances[send.instance].machine.recorded([claimKey(send)])), in: send.instance)
            schedule(.published(send: id), after: Int64.random(in: 1...10, using: &random))
        }
    }

    /// Performs a state machine's actions: permit and claim waiters go on, drains that ended revoke.
    private mutating func perform(_ actions: Machine.Actions, in instance: Int) {
        for waiter in actions.resume {
            if waiter > 0 {
                sends[waiter]?.holdsPermit = true
                schedule(.attempt(send: waiter), after: 0)
            } else {
                schedule(.claimAgain(send: -waiter), after: 0)
            }
        }
        for lane in actions.drained {
            for (partition, move) in moving.sorted(by: { $0.key < $1.key }) where move.from == instance && Self.lane(of: partition) == lane {
                if instances[instance].machine.inFlightCount(in: [Self.topicPartition(partition)], lane: lane) == 0 {
                    schedule(.revoked(partition: partition, move: move.id), after: 0)
                }
            }
        }
    }

    private mutating func crash(_ instance: Int) {
        guard instances[instance].alive, instances[1 - instance].alive else { return }
        let inFlight = unrecorded.values.filter { $0.instance == instance && $0.life == instances[instance].life }.count
        if inFlight > Self.permitLimit {
            violation = violation ?? "\(inFlight) pushes unrecorded at a crash, more than the \(Self.permitLimit) permits"
        }
        allowRepeats { key, _ in key.instance == instance }
        instances[instance] = Instance(
            machine: Machine(permitLimit: Self.permitLimit, bulkShare: 0.75, recentCapacity: 64),
            alive: false,
            life: instances[instance].life + 1
        )
        let lost = owner.filter { $0.value == instance }.map(\.key).sorted()
        for partition in lost { owner[partition] = nil }
        for (partition, move) in moving where move.from == instance {
            moving[partition] = nil
            owner[partition] = nil
            schedule(.takeOver(partitions: [partition], to: move.to), after: 1_000)
        }
        schedule(.takeOver(partitions: lost, to: 1 - instance), after: 1_000)
        schedule(.restart(instance: instance), after: Int64.random(in: 500...3_000, using: &random))
    }

    /// Deliveries pushed and not recorded that `matches` names may each be pushed once more.
    private mutating func allowRepeats(_ matches: ((instance: Int, life: Int), Delivery) -> Bool) {
        for (delivery, pusher) in unrecorded where matches(pusher, delivery) {
            allowedRepeats[delivery, default: 0] += 1
            unrecorded[delivery] = nil
        }
    }

    private mutating func checkQuiescence() -> String? {
        guard isDone else { return "not quiescent after \(now) ms: committed \(committed)" }
        for (message, facts) in messages {
            for device in 0..<facts.devices {
                let delivery = Delivery(partition: message.partition, offset: message.offset, device: device)
                if published[delivery] == nil { return "\(delivery) has no published result" }
                if pushes[delivery] == nil { return "\(delivery) never pushed" }
            }
        }
        for (index, instance) in instances.enumerated() where instance.alive {
            if instance.machine.permitsHeld > 0 || instance.machine.openBatches > 0 {
                return "instance \(index) holds \(instance.machine.permitsHeld) permits and \(instance.machine.openBatches) batches at quiescence"
            }
        }
        return nil
    }
}

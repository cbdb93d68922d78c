import Foundation
import KafkaMessages
import Testing

@testable import PushPipeline

/// A deterministic simulation of the delivery guarantee across rebalances: two members of a
/// group, each with the real ``OffsetTracker``, take turns owning three partitions while their
/// sends retry 429s with backoff, on a virtual clock driven by a seeded scheduler. The
/// simulated broker hands a partition to the same or the other member and redelivers from the
/// committed offset; the simulated ledger is read before a message's first sends (never before a
/// retry, as in Herald). Each invariant is checked at the step that could break it:
/// - no (message, device) is pushed twice (nothing crashes here, so nothing may repeat);
/// - an offset is committed only once every result of every message below it is published;
/// and at quiescence every device of every message has exactly one push and a published result.
///
/// A failing seed replays exactly: `HERALD_SIMULATION_SEED=<seed> swift test --filter LaneSimulation`
/// runs that seed alone; `HERALD_SIMULATION_SEEDS=<n>` runs n seeds (the test command runs 2,000).
@Suite struct LaneSimulationTests {
    @Test func noDevicePushedTwiceAndNoOffsetCommittedEarlyUnderRebalances() {
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
                // The run's last steps but polls and commits, to read what led there.
                let steps = simulation.steps.filter { !$0.contains("poll(") && !$0.contains("commit(") }.suffix(60).joined(separator: "\n")
                Issue.record("seed \(seed): \(violation) (replay: HERALD_SIMULATION_SEED=\(seed)); its last steps:\n\(steps)")
                return
            }
        }
    }
}

/// One run of the simulation; see ``LaneSimulationTests``.
struct LaneSimulation {
    /// A device of a message: what is pushed and recorded.
    struct Delivery: Hashable, CustomStringConvertible {
        var partition: Int32
        var offset: Int64
        var device: Int

        var description: String { "p\(partition)@\(offset)/d\(device)" }
    }

    enum Event {
        case poll(member: Int)
        /// A send's next attempt, under the generation its message started with.
        case attempt(member: Int, delivery: Delivery, generation: UInt64)
        /// The ledger recorded an outcome and its result was published.
        case recorded(member: Int, delivery: Delivery, generation: UInt64)
        case commit(member: Int)
        /// Starts moving a partition: its owner drains it, then it goes to `to`.
        case rebalance(partition: Int32, to: Int)
        case revoked(partition: Int32, move: Int)
    }

    /// A message a member is processing: its devices still without a result here.
    struct Run {
        var generation: UInt64
        var outstanding: Set<Int>
        var fenced = false
    }

    struct Member {
        var tracker = OffsetTracker()
        /// The next offset to poll, per assigned partition.
        var positions: [Int32: Int64] = [:]
        var runs: [Delivery: Run] = [:]  // keyed by (partition, offset, device: 0)
    }

    static let partitions: [Int32] = [0, 1, 2]
    static let messagesPerPartition: Int64 = 12
    static let topic = "push.requests.bulk"
    /// How long a revocation waits for the partition's messages (HERALD_REVOCATION_DRAIN_TIMEOUT).
    static let drainBound: Int64 = 2_000

    /// Seeded (SendPermitQueueTests' generator), so a seed replays the same run on every machine.
    private var random: SplitMix
    private var now: Int64 = 0  // virtual milliseconds
    /// The first invariant broken, when one is.
    private var violation: String?
    /// Partitions being moved: drained by `from`, then assigned to `to`.
    private var moving: [Int32: (from: Int, to: Int, id: Int)] = [:]
    private var moves = 0
    private var queue: [(time: Int64, sequence: Int, event: Event)] = []
    private var members = [Member(), Member()]
    private var owner: [Int32: Int] = [:]
    private var committed: [Int32: Int64] = [:]
    private var devices: [Delivery: Int] = [:]  // message (device 0) → device count
    private var ledger: Set<Delivery> = []
    private var pushes: [Delivery: Int] = [:]
    private var published: [Delivery: Int] = [:]

    init(seed: UInt64) {
        random = SplitMix(seed: seed)
        for partition in Self.partitions {
            for offset in 0..<Self.messagesPerPartition {
                devices[Delivery(partition: partition, offset: offset, device: 0)] = Int.random(in: 1...3, using: &random)
            }
            let member = Int.random(in: 0...1, using: &random)
            owner[partition] = member
            assign(partition, to: member)
        }
        for member in members.indices {
            schedule(.poll(member: member), after: 0)
            schedule(.commit(member: member), after: 250)
        }
        for _ in 0..<Int.random(in: 2...6, using: &random) {
            let partition = Self.partitions.randomElement(using: &random)!
            schedule(.rebalance(partition: partition, to: Int.random(in: 0...1, using: &random)), after: Int64.random(in: 0...6_000, using: &random))
        }
    }

    /// Every step taken, as text (the end of it is shown for a failing seed).
    private(set) var steps: [String] = []

    /// Runs to quiescence; returns the first invariant broken, or nil.
    mutating func run() -> String? {
        // The queue is kept latest first: the next event is its last element.
        while let next = queue.popLast(), now < 120_000 {
            now = next.time
            steps.append("\(now) ms: \(next.event)")
            step(next.event)
            if let violation { return "at \(now) ms: \(violation)" }
            if isDone { break }
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

    private mutating func assign(_ partition: Int32, to member: Int) {
        members[member].tracker.assign([KafkaTopicPartition(topic: Self.topic, partition: partition)])
        members[member].positions[partition] = committed[partition] ?? 0
    }

    private static func topicPartition(_ partition: Int32) -> KafkaTopicPartition {
        KafkaTopicPartition(topic: topic, partition: partition)
    }

    private mutating func step(_ event: Event) {
        switch event {
        case .poll(let member):
            poll(member)
            if !isDone { schedule(.poll(member: member), after: Int64.random(in: 5...50, using: &random)) }
        case .attempt(let member, let delivery, let generation):
            attempt(member, delivery, generation: generation)
        case .recorded(let member, let delivery, let generation):
            ledger.insert(delivery)
            published[delivery, default: 0] += 1
            settle(member, delivery, generation: generation, fenced: false)
        case .commit(let member):
            let offsets = members[member].tracker.committableOffsets()
            commit(offsets, by: member)
            if !isDone { schedule(.commit(member: member), after: 250) }
        case .rebalance(let partition, let to):
            guard let from = owner[partition] else { return }
            owner[partition] = nil
            moves += 1
            moving[partition] = (from, to, moves)
            let left = members[from].tracker.beginDrain([Self.topicPartition(partition)])
            // The drain ends when its last message settles (see `settle`), or at its bound, when
            // the partition goes with whatever is left.
            schedule(.revoked(partition: partition, move: moves), after: left == 0 ? 0 : Self.drainBound)
        case .revoked(let partition, let move):
            // Once per move: the drain's end and its bound both schedule it.
            guard let (from, to, id) = moving[partition], id == move else { return }
            moving[partition] = nil
            let offsets = members[from].tracker.revoke([Self.topicPartition(partition)])
            commit(offsets, by: from)
            members[from].positions[partition] = nil
            owner[partition] = to
            assign(partition, to: to)
        }
    }

    private mutating func commit(_ offsets: [KafkaTopicPartition: Int64], by member: Int) {
        for (topicPartition, offset) in offsets {
            // The broker refuses a commit from a member that no longer owns the partition... unless
            // it is the commit on revocation, made while it still does (owner nil: being moved).
            let current = owner[topicPartition.partition]
            guard current == member || current == nil else {
                steps.append("  member \(member)'s commit of p\(topicPartition.partition)@\(offset) refused: not its partition")
                continue
            }
            if committed[topicPartition.partition] != offset { steps.append("  p\(topicPartition.partition) committed at \(offset) by member \(member)") }
            committed[topicPartition.partition] = offset
            for below in 0..<offset {
                let message = Delivery(partition: topicPartition.partition, offset: below, device: 0)
                for device in 0..<devices[message]! where published[Delivery(partition: message.partition, offset: below, device: device)] == nil {
                    let unpublished = Delivery(partition: message.partition, offset: below, device: device)
                    violation = violation ?? "offset \(offset) of p\(message.partition) committed before the result of \(unpublished) was published"
                }
            }
        }
        members[member].tracker.markCommitted(offsets)
    }

    private mutating func poll(_ member: Int) {
        // Sorted: a dictionary's order differs from process to process, a seed's run must not.
        let pollable = members[member].positions.filter { $0.value < Self.messagesPerPartition }.sorted { $0.key < $1.key }
        guard let (partition, position) = pollable.randomElement(using: &random) else { return }
        guard let generation = members[member].tracker.start(Self.topicPartition(partition), offset: position) else { return }
        members[member].positions[partition] = position + 1
        let message = Delivery(partition: partition, offset: position, device: 0)
        var run = Run(generation: generation, outstanding: [])
        let lookup = Int64.random(in: 1...20, using: &random)
        for device in 0..<devices[message]! {
            let delivery = Delivery(partition: partition, offset: position, device: device)
            run.outstanding.insert(device)
            if ledger.contains(delivery) {
                // Recorded by an earlier owner: republished, not pushed.
                schedule(.recorded(member: member, delivery: delivery, generation: generation), after: lookup)
            } else {
                schedule(.attempt(member: member, delivery: delivery, generation: generation), after: lookup)
            }
        }
        members[member].runs[message] = run
    }

    private mutating func attempt(_ member: Int, _ delivery: Delivery, generation: UInt64) {
        if members[member].tracker.isFenced(Self.topicPartition(delivery.partition), generation: generation) {
            return settle(member, delivery, generation: generation, fenced: true)
        }
        if Int.random(in: 0..<5, using: &random) == 0 {
            // 429: nothing pushed; retried after a backoff, without reading the ledger again.
            schedule(.attempt(member: member, delivery: delivery, generation: generation), after: Int64.random(in: 100...3_000, using: &random))
            return
        }
        pushes[delivery, default: 0] += 1
        if pushes[delivery]! > 1 { violation = violation ?? "\(delivery) pushed \(pushes[delivery]!) times with no crash" }
        schedule(.recorded(member: member, delivery: delivery, generation: generation), after: Int64.random(in: 1...15, using: &random))
    }

    /// A device of a message has its result published here (or its send was fenced).
    private mutating func settle(_ member: Int, _ delivery: Delivery, generation: UInt64, fenced: Bool) {
        let message = Delivery(partition: delivery.partition, offset: delivery.offset, device: 0)
        guard var run = members[member].runs[message], run.generation == generation else { return }
        run.outstanding.remove(delivery.device)
        run.fenced = run.fenced || fenced
        members[member].runs[message] = run.outstanding.isEmpty ? nil : run
        guard run.outstanding.isEmpty else { return }
        let topicPartition = Self.topicPartition(delivery.partition)
        if run.fenced {
            members[member].tracker.giveUp(topicPartition, offset: delivery.offset, generation: generation)
        } else {
            members[member].tracker.finish(topicPartition, offset: delivery.offset, generation: generation)
        }
        if let move = moving[delivery.partition], move.from == member, members[member].tracker.inFlightCount(in: [topicPartition]) == 0 {
            schedule(.revoked(partition: delivery.partition, move: move.id), after: 0)
        }
    }

    private func checkQuiescence() -> String? {
        guard isDone else { return "not quiescent after \(now) ms: committed \(committed)" }
        for (message, count) in devices {
            for device in 0..<count {
                let delivery = Delivery(partition: message.partition, offset: message.offset, device: device)
                if pushes[delivery] != 1 { return "\(delivery) pushed \(pushes[delivery] ?? 0) times" }
            }
        }
        return nil
    }
}

import APNSCore
import PushCore
import FCMCore
import PushStores
import Dispatch
import Foundation
import KafkaMessages
import Logging
import PushPipeline
import PushPipelineTesting
import Synchronization
import Testing

/// The delivery guarantee checked on the code that ships: real ``NotificationPipeline`` instances
/// (their consume loops, state machine, ledger writer, sender, publisher) as the members of one
/// simulated consumer group, over one shared ledger and registry (``InMemoryTokenRegistry``), and
/// an APNs and an FCM whose every answer a seed decides (200; 400 or INVALID_ARGUMENT naming a
/// field; 429 or QUOTA_EXCEEDED; 503 or UNAVAILABLE; a time-out), for users with iPhones and
/// Android phones (one whose FCM token is the text of its iPhone's APNs token). The seed also
/// decides the world's moves, taken while events are being delivered: a partition moved to the
/// other member with a drain, or lost (the group gave it away after a session time-out), and a
/// member crashed (its task cancelled, its partitions given to the other member from the
/// committed offsets) and started again.
///
/// Checked at every commit: an offset is committed only once every result of every message below
/// it is published. Checked at the end, once every partition is committed to its end: every
/// device of every event has a result, every copy of a result is the first one byte for byte, and
/// no device got an event twice from APNs, except a send in flight when its member crashed or its
/// partition was lost (never more than the send permits each time).
///
/// Real time, not a virtual clock: the seed decides what happens, not exactly when. A failure
/// names its seed; `HERALD_PIPELINE_SIMULATION_SEED=<n>` runs that seed alone, and
/// `HERALD_PIPELINE_SIMULATION_SEEDS=<n>` runs n seeds (the test command runs 6).
@Suite(.serialized, .timeLimit(.minutes(5)))
struct ShippedPipelineSimulationTests {
    @Test func everyDeviceGetsItsResultAndNoneIsPushedTwiceUnderMovesLossesAndCrashes() async throws {
        let environment = ProcessInfo.processInfo.environment
        let seeds: [UInt64] =
            if let seed = environment["HERALD_PIPELINE_SIMULATION_SEED"].flatMap(UInt64.init) {
                [seed]
            } else {
                Array(1...UInt64(environment["HERALD_PIPELINE_SIMULATION_SEEDS"].flatMap(Int.init) ?? 6))
            }
        for seed in seeds {
            let world = try await SimulatedWorld(seed: seed)
            let violations = try await world.run()
            #expect(violations.isEmpty, "seed \(seed) (replay: HERALD_PIPELINE_SIMULATION_SEED=\(seed)): \(violations.prefix(8))")
            if !violations.isEmpty { return }
        }
    }
}

/// The events, the registry, the group, APNs and the members of one seed's run.
final class SimulatedWorld: Sendable {
    static let partitions: [Int32] = [0, 1, 2]
    static let topic = "push.requests"
    static let app = "com.example.shop"
    static let package = "com.example.shop.android"
    static let maxConcurrentSends = 8

    let seed: UInt64
    let registry = InMemoryTokenRegistry()
    let publisher = InMemoryMessagePublisher()
    let apns: SimulatedAPNs
    let fcm: SimulatedFCM
    let group: SimulatedGroup
    /// Each event's ID, and its users' devices (`apns <token>` or `fcm <token>`).
    let events: [(id: String, devices: [String])]
    private let violations = Mutex<[String]>([])

    init(seed: UInt64) async throws {
        self.seed = seed
        var generator = SplitMix(seed: seed)
        var devicesOfUser: [String: [String]] = [:]
        for user in 0..<12 {
            let tokens = (0..<Int.random(in: 1...2, using: &generator)).map { _ in
                (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &generator)) }.joined()
            }
            devicesOfUser["u\(user)"] = tokens.map { "apns \($0)" }
            for token in tokens {
                registry.register(DeviceToken(userID: "u\(user)", token: token, environment: .production), topic: Self.app)
            }
            // Every third user also has an Android phone; user 0's FCM token is the text of its
            // iPhone's token (one event, two targets with one string: the ledger and the claims
            // must keep them apart).
            guard user % 3 == 0 else { continue }
            let android = user == 0 ? tokens[0] : "fcm-\(user)-" + (0..<24).map { _ in String(UInt8.random(in: 0...9, using: &generator)) }.joined()
            devicesOfUser["u\(user)", default: []].append("fcm \(android)")
            registry.register(DeviceToken(userID: "u\(user)", token: android, environment: .production, platform: .fcm), topic: Self.package)
        }
        var events: [(String, [String])] = []
        var messages: [Int32: [KafkaMessage]] = [:]
        for index in 0..<90 {
            let users = Array(devicesOfUser.keys.sorted().shuffled(using: &generator).prefix(Int.random(in: 1...3, using: &generator)))
            let id = "s\(seed)-e\(index)"
            let partition = Self.partitions[index % Self.partitions.count]
            let list = users.map { "\"\($0)\"" }.joined(separator: ",")
            let json =
                #"{"id":"\#(id)","user_ids":[\#(list)],"topic":"\#(Self.app)","payload":{"aps":{"alert":"hi"}},"#
                + #""fcm":{"package":"\#(Self.package)","message":{"data":{"event":"\#(id)"}}}}"#
            let offset = Int64(messages[partition, default: []].count)
            messages[partition, default: []].append(
                KafkaMessage(
                    topic: Self.topic, partition: partition, offset: offset, key: Array(id.utf8), value: Array(json.utf8),
                    timestampMilliseconds: 1_795_690_800_000 + Int64(index)))
            events.append((id, users.flatMap { devicesOfUser[$0] ?? [] }))
        }
        self.events = events
        apns = SimulatedAPNs(seed: seed)
        fcm = SimulatedFCM(seed: seed)
        group = SimulatedGroup(messages: messages)
        group.onCommit = { [weak self] partition, offset in self?.checkCommit(partition: partition, below: offset) }
    }

    /// A pipeline instance of member `member`, fast to retry and to drain.
    func pipeline(for member: SimulatedMember) -> NotificationPipeline {
        var configuration = PipelineConfiguration()
        // The load-shedding pause scaled down with the backoff: a fifth of the answers are 503s
        // and time-outs, which would otherwise slow every send by seconds.
        configuration.retry = RetryPolicy(
            maxAttempts: 6, deliveryDeadline: .seconds(30), requestTimeout: .milliseconds(300), initialBackoff: .milliseconds(5),
            maximumBackoff: .milliseconds(40),
            loadShedding: LoadSheddingPolicy(initialPause: .milliseconds(2), maximumPause: .milliseconds(40), halfLife: .milliseconds(100)))
        configuration.maxConcurrentSends = Self.maxConcurrentSends
        configuration.commitInterval = .milliseconds(10)
        configuration.revocationDrainTimeout = .seconds(2)
        configuration.pollBatchSize = 8
        var logger = Logger(label: "simulation")
        logger.logLevel = .critical
        return NotificationPipeline(
            configuration: configuration, source: member, publisher: publisher, store: registry, ledger: registry, apns: apns, fcm: fcm,
            logger: logger)
    }

    /// Runs the seed's moves while the events are delivered, then waits until every partition is
    /// committed to its end; returns what broke.
    func run() async throws -> [String] {
        var generator = SplitMix(seed: seed ^ 0xD1B5_4A32_D192_ED03)
        var crashes = 0
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            func start(slot: Int) {
                let member = group.startMember(slot: slot)
                let pipeline = pipeline(for: member)
                member.listener = pipeline
                tasks.addTask { try? await pipeline.runUntilCrashed(member) }
            }
            for slot in 0..<2 { start(slot: slot) }
            for (index, partition) in Self.partitions.enumerated() { group.assign(partition, toSlot: index % 2) }
            group.release(messagesPerPartition: 10)
            for _ in 0..<12 {
                try await Task.sleep(for: .milliseconds(Int.random(in: 20...120, using: &generator)))
                group.release(messagesPerPartition: 10)
                let partition = Self.partitions.randomElement(using: &generator)!
                switch Int.random(in: 0..<10, using: &generator) {
                case 0..<5:
                    await group.move(partition, lost: false)
                case 5..<7:
                    await group.move(partition, lost: true)
                case 7..<9:
                    let slot = Int.random(in: 0..<2, using: &generator)
                    crashes += 1
                    group.crash(slot: slot)
                    start(slot: slot)
                default:
                    break
                }
            }
            group.release(messagesPerPartition: 1_000)
            let deadline = ContinuousClock.now + .seconds(60)
            while !group.isCommittedToTheEnd, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
            if !group.isCommittedToTheEnd { record("not every partition was committed to its end: \(group.committedSummary)") }
            group.stopEveryMember()
            tasks.cancelAll()
        }
        checkResults(crashes: crashes)
        return violations.withLock { $0 }
    }

    private func record(_ violation: String) {
        violations.withLock { $0.append(violation) }
    }

    /// Every result of every message below `offset` of `partition` is published.
    private func checkCommit(partition: Int32, below offset: Int64) {
        let published = publishedResults()
        for index in stride(from: Int(partition), to: events.count, by: Self.partitions.count) where Int64(index / Self.partitions.count) < offset {
            let event = events[index]
            let missing = Set(event.devices).subtracting(published[event.id, default: [:]].keys)
            if !missing.isEmpty { record("offset \(offset) of partition \(partition) committed before \(event.id)'s results for \(missing.count) devices") }
        }
    }

    /// Each event's results by device (`<platform> <token>`): every copy's bytes.
    private func publishedResults() -> [String: [String: [[UInt8]]]] {
        var results: [String: [String: [[UInt8]]]] = [:]
        for message in publisher.messages(on: "push.results") {
            guard let value = message.value, let json = try? JSONSerialization.jsonObject(with: Data(value)) as? [String: Any],
                let event = json["event_id"] as? String, let token = json["token"] as? String, let platform = json["platform"] as? String
            else { continue }
            results[event, default: [:]]["\(platform) \(token)", default: []].append(value)
        }
        return results
    }

    private func checkResults(crashes: Int) {
        let published = publishedResults()
        var repeated = 0
        for event in events {
            for device in event.devices {
                let copies = published[event.id]?[device] ?? []
                if copies.isEmpty { record("\(event.id): no result for a device") }
                if Set(copies).count > 1 { record("\(event.id): results that differ for one device") }
                let token = String(device.split(separator: " ")[1])
                let pushes = device.hasPrefix("apns ") ? apns.delivered(event: event.id, token: token) : fcm.delivered(event: event.id, token: token)
                repeated += max(0, pushes - 1)
            }
        }
        let allowed = crashes * Self.maxConcurrentSends + group.lostCount * Self.maxConcurrentSends
        if repeated > allowed {
            record("\(repeated) devices pushed twice with \(crashes) crashes and \(group.lostCount) lost partitions (at most \(allowed))")
        }
    }
}

extension NotificationPipeline {
    /// Runs until its member crashes or the run ends: then cancelled at once, as a SIGKILL ends a
    /// process (its member polls nothing more and commits nothing from then on).
    fileprivate func runUntilCrashed(_ member: SimulatedMember) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await self.run() }
            group.addTask { await member.waitUntilEnded() }
            try await group.next()
            group.cancelAll()
        }
    }
}

/// A simulated push service's attempts: each attempt of one (event, device) gets a choice drawn
/// from the seed, the key and the attempt's number, so the same attempt is answered alike in
/// every run; what was accepted is counted per key.
final class SeededAnswers: Sendable {
    private let seed: UInt64
    private let state = Mutex<(attempts: [String: Int], delivered: [String: Int])>(([:], [:]))

    init(seed: UInt64) { self.seed = seed }

    /// Waits a drawn 1 to 15 ms (the service's latency) and returns the attempt's number and a
    /// choice in 0..<100.
    func nextAttempt(_ key: String) async throws -> (attempt: Int, choice: Int) {
        let attempt = state.withLock { state in
            state.attempts[key, default: 0] += 1
            return state.attempts[key]!
        }
        var generator = SplitMix(seed: seed ^ UInt64(truncatingIfNeeded: "\(key)#\(attempt)".hashValueStable))
        try await Task.sleep(for: .milliseconds(Int.random(in: 1...15, using: &generator)))
        return (attempt, Int.random(in: 0..<100, using: &generator))
    }

    func accepted(_ key: String) { state.withLock { $0.delivered[key, default: 0] += 1 } }

    func acceptedCount(_ key: String) -> Int { state.withLock { $0.delivered[key, default: 0] } }
}

/// APNs as the seed decides (``SeededAnswers``), per apns-id and token.
final class SimulatedAPNs: APNSClientProtocol {
    private let answers: SeededAnswers

    init(seed: UInt64) { answers = SeededAnswers(seed: seed) }

    func send(_ request: APNSRequest, environment: APNSEnvironment, deadline: ContinuousClock.Instant) async throws -> APNSResponse {
        let key = "\(request.apnsID)|\(request.deviceToken)"
        switch try await answers.nextAttempt(key).choice {
        case 0..<70:
            answers.accepted(key)
            return APNSResponse(status: 200, apnsID: request.apnsID)
        case 70..<78: return APNSResponse(status: 429, apnsID: request.apnsID, reason: .tooManyRequests)
        case 78..<86: return APNSResponse(status: 503, apnsID: request.apnsID, reason: .serviceUnavailable)
        // A final refusal; not 410, which would change the registry the expectations are built from.
        case 86..<91: return APNSResponse(status: 400, apnsID: request.apnsID, reason: .badDeviceToken)
        default: throw TransportError.deadlineExceeded("simulated time-out")
        }
    }

    /// How often APNs accepted the event `event` for `token` (200).
    func delivered(event: String, token: String) -> Int {
        answers.acceptedCount("\(NotificationID.derive(eventID: event, token: token))|\(token)")
    }
}

/// FCM as the seed decides, as ``SimulatedAPNs`` does for APNs; the message's `data.event` names
/// its event.
final class SimulatedFCM: FCMClientProtocol {
    private let answers: SeededAnswers

    init(seed: UInt64) { answers = SeededAnswers(seed: ~seed) }

    func send(_ request: FCMRequest, deadline: ContinuousClock.Instant) async throws -> FCMResponse {
        let body = String(decoding: request.body(nowMilliseconds: 0), as: UTF8.self)
        let event = body.split(separator: #""event":""#).last?.split(separator: "\"").first.map(String.init) ?? ""
        let key = "\(event)|\(request.target.value)"
        func error(_ status: Int, _ canonical: String, _ code: FCMErrorCode) -> FCMResponse {
            FCMResponse(status: status, error: FCMErrorBody(code: status, status: canonical, errorCode: code))
        }
        let (attempt, choice) = try await answers.nextAttempt(key)
        switch choice {
        case 0..<70:
            answers.accepted(key)
            return FCMResponse(status: 200, messageName: "projects/p/messages/\(attempt)")
        case 70..<78: return error(429, "RESOURCE_EXHAUSTED", .quotaExceeded)
        case 78..<86: return error(503, "UNAVAILABLE", .unavailable)
        case 86..<91:
            var refused = error(400, "INVALID_ARGUMENT", .invalidArgument)
            refused.error?.fieldViolations = [.init(field: "message.data[0].value", description: "bad")]
            return refused
        default: throw TransportError.deadlineExceeded("simulated time-out")
        }
    }

    /// How often FCM accepted the event `event` for `token` (200).
    func delivered(event: String, token: String) -> Int {
        answers.acceptedCount("\(event)|\(token)")
    }
}

extension String {
    /// FNV-1a of the UTF-8: the same in every process (`hashValue` is seeded per process).
    fileprivate var hashValueStable: UInt64 {
        utf8.reduce(0xCBF2_9CE4_8422_2325) { ($0 ^ UInt64($1)) &* 0x0100_0000_01B3 }
    }
}

/// The consumer group: the partitions' records (released a few at a time, as producers publish
/// them), their committed offsets and owners, and the member running in each of two slots (a
/// crashed member is replaced by a new one in its slot). A commit from a member that does not own
/// the partition is refused, as the broker refuses one of a dead generation.
final class SimulatedGroup: @unchecked Sendable {
    // @unchecked Sendable: every stored property is behind `state` (a Mutex), except `onCommit`,
    // which is set once in the world's initializer before any member exists and only read after.
    private struct State {
        var messages: [Int32: [KafkaMessage]]
        var released: [Int32: Int] = [:]
        var committed: [Int32: Int64] = [:]
        var owner: [Int32: SimulatedMember] = [:]
        var members: [Int: SimulatedMember] = [:]
        var lost = 0
    }

    private let state: Mutex<State>
    var onCommit: @Sendable (Int32, Int64) -> Void = { _, _ in }

    init(messages: [Int32: [KafkaMessage]]) {
        state = Mutex(State(messages: messages))
    }

    /// A new member in `slot`.
    func startMember(slot: Int) -> SimulatedMember {
        let member = SimulatedMember(slot: slot, group: self)
        state.withLock { $0.members[slot] = member }
        return member
    }

    /// Makes up to `count` more records of each partition readable.
    func release(messagesPerPartition count: Int) {
        state.withLock { state in
            for (partition, messages) in state.messages {
                state.released[partition] = min(messages.count, state.released[partition, default: 0] + count)
            }
        }
    }

    var lostCount: Int { state.withLock { $0.lost } }

    var isCommittedToTheEnd: Bool {
        state.withLock { state in state.messages.allSatisfy { state.committed[$0.key, default: 0] == Int64($0.value.count) } }
    }

    var committedSummary: String {
        state.withLock { state in state.messages.keys.sorted().map { "p\($0): \(state.committed[$0, default: 0])/\(state.messages[$0]!.count)" } }
            .joined(separator: ", ")
    }

    /// Gives `partition` to the member in `slot`, which reads it from its committed offset.
    func assign(_ partition: Int32, toSlot slot: Int) {
        let (member, from) = state.withLock { state in
            let member = state.members[slot]!
            state.owner[partition] = member
            return (member, state.committed[partition, default: 0])
        }
        member.assigned(partition, from: from)
    }

    /// Moves `partition` to the other slot's member: revoked with a drain (on a thread of its own,
    /// as librdkafka's callback runs) and its returned offsets committed, or lost (nothing committed).
    func move(_ partition: Int32, lost: Bool) async {
        guard let from = state.withLock({ $0.owner[partition] }) else { return }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().async {
                from.revoke(partition, lost: lost)
                continuation.resume()
            }
        }
        if lost { state.withLock { $0.lost += 1 } }
        assign(partition, toSlot: 1 - from.slot)
    }

    /// Crashes the member in `slot`: it ends at once, and after a session time-out its partitions
    /// go to the other slot's member from the committed offsets, with no revocation.
    func crash(slot: Int) {
        let (member, partitions) = state.withLock { state in
            let member = state.members[slot]!
            return (member, state.owner.filter { $0.value === member }.keys.sorted())
        }
        member.end()
        for partition in partitions { assign(partition, toSlot: 1 - slot) }
    }

    /// Ends every member (the end of the run).
    func stopEveryMember() {
        for member in state.withLock({ Array($0.members.values) }) { member.end() }
    }

    /// The records of `partition` from `offset`, up to `count`, that producers published.
    func records(_ partition: Int32, from offset: Int64, count: Int) -> [KafkaMessage] {
        state.withLock { state in
            let end = min(Int(offset) + count, state.released[partition, default: 0])
            guard Int(offset) < end else { return [] }
            return Array(state.messages[partition]![Int(offset)..<end])
        }
    }

    /// Commits for `member` the partitions it owns; throws for one it does not.
    func commit(_ offsets: [KafkaTopicPartition: Int64], by member: SimulatedMember) throws {
        for (topicPartition, offset) in offsets.sorted(by: { $0.key.partition < $1.key.partition }) {
            let partition = topicPartition.partition
            let owned = state.withLock { $0.owner[partition] === member }
            guard owned, !member.hasEnded else { throw SimulatedCommitRefused() }
            onCommit(partition, offset)
            state.withLock { $0.committed[partition] = max($0.committed[partition, default: 0], offset) }
        }
    }
}

struct SimulatedCommitRefused: Error {}

/// One member of the group, the message source of one pipeline instance.
final class SimulatedMember: MessageSource {
    private struct State {
        var positions: [Int32: Int64] = [:]
        var listener: (any KafkaRebalanceListener)?
        var ended = false
        var endWaiters: [CheckedContinuation<Void, Never>] = []
    }

    let slot: Int
    private let group: SimulatedGroup
    private let state = Mutex(State())

    init(slot: Int, group: SimulatedGroup) {
        self.slot = slot
        self.group = group
    }

    var listener: (any KafkaRebalanceListener)? {
        get { state.withLock { $0.listener } }
        set { state.withLock { $0.listener = newValue } }
    }

    var hasEnded: Bool { state.withLock { $0.ended } }

    func assigned(_ partition: Int32, from offset: Int64) {
        state.withLock { $0.positions[partition] = offset }
        listener?.partitionsAssigned([KafkaTopicPartition(topic: SimulatedWorld.topic, partition: partition)])
    }

    /// Revokes `partition` as librdkafka's callback does (blocking this thread for the drain), or
    /// reports it lost; commits what a revocation returns.
    func revoke(_ partition: Int32, lost: Bool) {
        let topicPartition = KafkaTopicPartition(topic: SimulatedWorld.topic, partition: partition)
        if lost {
            listener?.partitionsLost([topicPartition])
        } else if let offsets = listener?.partitionsRevoked([topicPartition]), !offsets.isEmpty {
            try? group.commit(offsets, by: self)
        }
        _ = state.withLock { $0.positions.removeValue(forKey: partition) }
    }

    /// Ends this member at once, as a SIGKILL ends a process: it polls and commits nothing more.
    func end() {
        let waiters = state.withLock { state in
            state.ended = true
            state.positions = [:]
            defer { state.endWaiters = [] }
            return state.endWaiters
        }
        for waiter in waiters { waiter.resume() }
    }

    func waitUntilEnded() async {
        await withCheckedContinuation { continuation in
            let ended = state.withLock { state in
                if !state.ended { state.endWaiters.append(continuation) }
                return state.ended
            }
            if ended { continuation.resume() }
        }
    }

    func poll(maxMessages: Int, timeout: Duration) async throws -> [KafkaMessage] {
        let positions = state.withLock { $0.positions }
        var batch: [KafkaMessage] = []
        for (partition, position) in positions.sorted(by: { $0.key < $1.key }) where batch.count < maxMessages {
            let records = group.records(partition, from: position, count: maxMessages - batch.count)
            batch += records
            if let last = records.last {
                state.withLock { state in
                    if state.positions[partition] == position { state.positions[partition] = last.offset + 1 }
                }
            }
        }
        if batch.isEmpty { try await Task.sleep(for: .milliseconds(5)) }
        return batch
    }

    func commit(_ offsets: [KafkaTopicPartition: Int64]) async throws {
        try group.commit(offsets, by: self)
    }

    func setRebalanceListener(_ listener: any KafkaRebalanceListener) {
        self.listener = listener
    }

    func pauseAll() async throws {}
    func resumeAll() async throws {}
    func leaveGroup() async {}
}

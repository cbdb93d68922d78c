import APNSCore
import PushCore
import FCMCore
import PushStores
import Dispatch
import Foundation
import JSONCore
import MockServerSupport
import KafkaMessages
import Logging
import PushPipeline
import PushPipelineTesting
import PostgresStores
import KafkaTransport
import Synchronization
import ServiceLifecycleTestKit
import Testing
import WebPushCore

/// The delivery guarantee checked on the code that ships: real ``NotificationPipeline`` instances
/// (their consume loops, state machine, ledger writer, sender, publisher) as the members of two
/// simulated consumer groups, the urgent lane's on push.requests and the bulk lane's (paced) on
/// push.requests.bulk, over one shared registry and ledger, for users with iPhones, Android
/// phones (one whose FCM token is the text of its iPhone's APNs token) and browsers. What the
/// world answers, a seed decides:
/// - APNs, FCM and the web push service: 200/201; a final refusal (400, INVALID_ARGUMENT naming a
///   field, 413); 429 or QUOTA_EXCEEDED; 503 or UNAVAILABLE; a stream refused by a GOAWAY (nothing
///   pushed); a time-out;
/// - PostgreSQL (``SimulatedPostgres``): each registry or ledger call answers after a latency,
///   fails before it lands, lands and then fails (the connection lost before the answer), or runs
///   past the pipeline's time limit (a dead connection);
///   the ledger keys each outcome by the primary key the shipped PostgreSQL ledger writes
///   (``LedgerRowIdentity``), so targets whose keys collide share one outcome, as rows do;
/// - Kafka (``SimulatedGroup``): an assignment, a revocation or a loss performs the steps the
///   shipped rebalance callback decides (``RebalanceStep``), and callbacks and commits run one at
///   a time on the member's queue, as librdkafka's do; the bulk lane's group starts as after an
///   upgrade from the shared group: with no offsets of its own, and a few records of each
///   partition committed by the previous release's group, which the shipped seed
///   (``seededStartOffsets(committed:committedByEarlierGroup:)``) must keep from being read,
///   pushed or published again;
/// - the records' timestamps straddle a UTC midnight, and a quarter carry none (their ledger day
///   is the day they are polled); the wall clock starts half a second before that midnight and
///   is stepped back across it once, as an NTP correction does.
/// The seed also decides the world's moves, taken while events are being delivered: a partition
/// of either lane moved to the other member with a drain (during a retry storm on it: FCM and the
/// web push service ask its sends to wait longer than the drain may take), or lost (the group
/// gave it away after a session time-out), a member crashed (its task cancelled, both lanes'
/// partitions given to the other member from the committed offsets) and started again, or a
/// member replaced as a rollout does (a graceful stop: its lanes finish, commit and leave the
/// group through their revocation callbacks; checked to end within 30 s, and to repeat nothing).
///
/// Checked at every revocation: its drain ends before its bound (the sends waiting to retry are
/// given up at once, not waited for).
/// Checked at every stream lease: no bulk request gets a stream while an urgent one waits for one
/// (``SimulatedStreams``: each instance's connection to each service allows few streams).
/// Checked at every send: none starts for a partition its member was told it gave up or lost
/// (but one that passed its fence as it closed: at most the send permits per move).
/// Checked at every commit: an offset is committed only once every result of every message below
/// it is published, and never for a partition its member was told it lost. Checked at the end,
/// once every partition is committed to its end and a lost partition's requests still in flight
/// have ended: no member still holds anything that only work in flight holds (send permits, poll
/// batches, claims, waiters, unrecorded outcomes); every device of every event has a result,
/// every copy of a result is the first one byte for byte (but for an untimed record polled on
/// both sides of the midnight), and no device got an event twice, except a send in flight when
/// its member crashed or its partition was lost (never more than the send permits each time):
/// a device of an event no crash or loss exposed to a second member (its record at or above the
/// committed offset then) is pushed once, whatever rebalances and graceful stops it went through.
/// Checked once the run is over: every pipeline instance it ran was freed (none is held by a task
/// that never resumed, or by a cycle).
///
/// On a seeded serial executor with a virtual clock (``SimulationScheduler``): the seed decides
/// what happens, in which order and when, and a seed replays exactly. A world takes the CPU its
/// work takes (about 45 ms of CPU in the release build), not the time its waits last (about 2 s
/// of virtual time), and ``worldsAtOnce`` worlds run side by side, each with its own groups,
/// registry, ledger, services and scheduler thread. A failure names its seed; `HERALD_PIPELINE_SIMULATION_SEED=<n>` runs
/// that seed alone and prints its steps and fingerprint (with `SWIFT_DETERMINISTIC_HASHING=1`,
/// which the test command sets, the same in every process), and
/// `HERALD_PIPELINE_SIMULATION_SEEDS=<n>` runs n seeds (the test command runs
/// 2,000 in a release build, a plain `swift test` 50).
@Suite(.serialized, .timeLimit(.minutes(10)))
struct ShippedPipelineSimulationTests {
    #if DEBUG
    /// A plain `swift test` (a debug build, every suite at once) runs 50 seeds, one at a time,
    /// so the suites beside it keep their cores.
    static let (defaultSeeds, worldsAtOnce) = (50, 1)
    #else
    /// The test command's seeds (a release build), a world on each core: about 45 s on two cores,
    /// in the shard beside the longer one.
    static let (defaultSeeds, worldsAtOnce) = (2_000, 2)
    #endif

    /// What one seed's run broke, every record it published (in order), and the scheduler's
    /// account of it.
    /// Once the run is over, every pipeline instance of it must be freed: one still held is held
    /// by a task that never resumed (a wake-up lost) or by a reference cycle.
    static func simulate(seed: UInt64) async throws -> (violations: [String], published: [[UInt8]], run: SimulationScheduler.Summary) {
        let scheduler = SimulationScheduler(seed: seed, wallClockStart: SimulatedWorld.midnightMilliseconds - 500)
        let (found, published, pipelines) = try await scheduler.run {
            let world = try await SimulatedWorld(seed: seed, scheduler: scheduler)
            let violations = try await world.run()
            return (violations, world.publisher.published.map { Array($0.topic.utf8) + ($0.key ?? []) + ($0.value ?? []) }, world.pipelinesMade)
        }
        var violations = found
        let kept = pipelines.indices.filter { pipelines[$0].pipeline != nil }
        if !kept.isEmpty { violations.append("pipeline instances \(kept) of \(pipelines.count) outlived the run") }
        return (violations, published, scheduler.summaryOfRun)
    }

    @Test func everyDeviceGetsItsResultAndNoneIsPushedTwiceUnderMovesLossesAndCrashes() async throws {
        let environment = ProcessInfo.processInfo.environment
        if let seed = environment["HERALD_PIPELINE_SIMULATION_SEED"].flatMap(UInt64.init) {
            let (violations, _, run) = try await Self.simulate(seed: seed)
            print("seed \(seed): \(run)")
            #expect(violations.isEmpty, "seed \(seed): \(violations)")
            return
        }
        let seeds = 1...UInt64(environment["HERALD_PIPELINE_SIMULATION_SEEDS"].flatMap(Int.init) ?? Self.defaultSeeds)
        let failed = try await withThrowingTaskGroup(of: (seed: UInt64, violations: [String]).self) { worlds -> (seed: UInt64, violations: [String])? in
            var next = seeds.makeIterator()
            func startNext() {
                guard let seed = next.next() else { return }
                worlds.addTask { (seed, try await Self.simulate(seed: seed).violations) }
            }
            for _ in 0..<Self.worldsAtOnce { startNext() }
            // After a failure no world starts; the one beside it runs to its end (a world is not
            // made to stop half-way).
            var failed: (seed: UInt64, violations: [String])?
            while let world = try await worlds.next() {
                if failed == nil, !world.violations.isEmpty { failed = world }
                if failed == nil { startNext() }
            }
            return failed
        }
        if let failed {
            Issue.record(
                "seed \(failed.seed) (replay: SWIFT_DETERMINISTIC_HASHING=1 HERALD_PIPELINE_SIMULATION_SEED=\(failed.seed)): \(failed.violations.prefix(8))")
        }
    }

    /// Two runs of one seed take the same steps in the same order, publish the same records byte
    /// for byte (their timestamps and latencies too) and break the same rules: the world has no
    /// source of order but the seed (no thread beside the scheduler's, no clock but its, no random
    /// draw but its). Only with `SWIFT_DETERMINISTIC_HASHING` set (the test command sets it):
    /// otherwise each dictionary's order is seeded by its storage's address, so two runs in one
    /// process iterate them differently.
    @Test(.enabled(if: ProcessInfo.processInfo.environment["SWIFT_DETERMINISTIC_HASHING"] != nil))
    func aSeedReplaysExactly() async throws {
        let first = try await Self.simulate(seed: 7)
        let second = try await Self.simulate(seed: 7)
        #expect(first.run.steps > 1_000)
        #expect(first.published.count > 200)
        #expect(first.run == second.run)
        #expect(first.published == second.published)
        #expect(first.violations == second.violations)
    }
}

/// A pipeline instance, not kept alive by this reference.
struct WeakPipeline: Sendable {
    weak var pipeline: NotificationPipeline?
}

/// One event of a seed's run: where its record is, and its users' devices (`apns <token>`,
/// `fcm <token>` or `webpush <endpoint>`).
struct SimulatedEvent: Sendable {
    var id: String
    var topic: String
    var partition: Int32
    var offset: Int64
    var devices: [String]
    /// Whether its record carries no timestamp.
    var isUntimed: Bool
    /// Whether the previous release delivered it: its record is below the offset the previous
    /// release's shared group committed on push.requests.bulk, where the bulk lane's new group
    /// starts (an upgrade); nothing of it may be pushed or published again.
    var wasDeliveredBeforeTheUpgrade = false
}

/// The events, the registry, the groups, the push services and the members of one seed's run.
final class SimulatedWorld: Sendable {
    static let topics = PushTopics()
    static let app = "com.example.shop"
    static let package = "com.example.shop.android"
    static let webApp = "shop-web"
    static let maxConcurrentSends = 8
    /// How long a revocation may drain (the pipeline's `revocationDrainTimeout`).
    static let revocationDrainBound: Duration = .seconds(2)
    /// The `Retry-After` of the answers in a retry storm: longer than the drain bound, so a drain
    /// that waited for a send asked to wait runs into its bound.
    static let stormRetryAfter: Duration = .seconds(3)
    /// 2026-11-28T00:00:00Z: the records' timestamps straddle it.
    static let midnightMilliseconds: Int64 = 1_795_737_600_000
    /// The browsers' subscription keys: RFC 8291 Appendix A's user agent keys, a point on P-256
    /// and a 16-byte secret.
    static let browserP256DH = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"
    static let browserAuth = "BTBZMqHH6r4Tts7J_aSIgg"

    let seed: UInt64
    /// Where every task of the world runs (the pipelines' too, as `herald run` gives its
    /// pipeline an event loop), and its clocks.
    let scheduler: SimulationScheduler
    /// The registry, and the ledger keyed as PostgreSQL keys its rows: by the primary key the
    /// shipped ledger writes (``LedgerRowIdentity``), so outcomes whose keys it lets collide are one.
    let registry = InMemoryTokenRegistry { event, target in LedgerRowIdentity(event: event, target: target) }
    let postgres: SimulatedPostgres
    let publisher = InMemoryMessagePublisher()
    let apns: SimulatedAPNs
    let fcm: SimulatedFCM
    let webPush: SimulatedWebPush
    /// The urgent lane's group (push.requests, three partitions) and the bulk lane's
    /// (push.requests.bulk, two).
    let groups: [SimulatedGroup]
    let events: [SimulatedEvent]
    /// Each event by its ID, and the event of each APNs request's apns-id.
    let eventsByID: [String: SimulatedEvent]
    let eventIDOfAPNSID: [String: String]
    private let violations = Mutex<[String]>([])
    /// Every pipeline instance of the run, in the order they started; none may outlive it.
    private let pipelines = Mutex<[WeakPipeline]>([])
    var pipelinesMade: [WeakPipeline] { pipelines.withLock { $0 } }
    /// Each running member's graceful stop (its SIGTERM), by slot, set when its task starts.
    private let stops = Mutex<[Int: GracefulShutdownTestTrigger]>([:])
    /// The results read so far (``publishedResults()``): how many, and by event and device.
    private let resultsRead = Mutex<(count: Int, results: [String: [String: [[UInt8]]]])>((0, [:]))
    /// The sends that started after their member was told it gave their partition up.
    private let lateSends = Mutex<[String]>([])
    /// The partition in a retry storm: FCM and the web push service ask its sends to wait
    /// ``stormRetryAfter`` (set just before the partition is revoked).
    private let storm = Mutex<(topic: String, partition: Int32)?>(nil)

    init(seed: UInt64, scheduler: SimulationScheduler) async throws {
        self.seed = seed
        self.scheduler = scheduler
        var generator = SeededRandomNumberGenerator(seed: seed)
        var devicesOfUser: [String: [String]] = [:]
        for user in 0..<12 {
            let tokens = (0..<Int.random(in: 1...2, using: &generator)).map { _ in
                (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &generator)) }.joined()
            }
            devicesOfUser["u\(user)"] = tokens.map { "apns \($0)" }
            for token in tokens {
                registry.register(DeviceToken(userID: "u\(user)", token: token, environment: .production), topic: Self.app)
            }
            // Every fourth user also has a browser.
            if user % 4 == 1 {
                let endpoint = "https://fcm.googleapis.com/fcm/send/s\(seed)-u\(user)"
                devicesOfUser["u\(user)", default: []].append("webpush \(endpoint)")
                let keys = WebPushKeys(p256dh: Self.browserP256DH, auth: Self.browserAuth)
                registry.register(
                    DeviceToken(userID: "u\(user)", token: endpoint, environment: .production, platform: .webpush, webPush: keys),
                    topic: Self.webApp)
            }
            // Every third user also has an Android phone; user 0's FCM token is the text of its
            // iPhone's token, and user 3 has a second one whose token spells the first's bytes
            // in hex (one event, two targets whose tokens look alike: the ledger and the claims
            // must keep them apart).
            guard user % 3 == 0 else { continue }
            let android = user == 0 ? tokens[0] : "fcm-\(user)-" + (0..<24).map { _ in String(UInt8.random(in: 0...9, using: &generator)) }.joined()
            let androids = user == 3 ? [android, android.utf8.map { String(format: "%02x", $0) }.joined()] : [android]
            for android in androids {
                devicesOfUser["u\(user)", default: []].append("fcm \(android)")
                registry.register(DeviceToken(userID: "u\(user)", token: android, environment: .production, platform: .fcm), topic: Self.package)
            }
        }
        let partitions: [String: [Int32]] = [Self.topics.requests: [0, 1, 2], Self.topics.bulkRequests: [0, 1]]
        var events: [SimulatedEvent] = []
        var messages: [String: [Int32: [KafkaMessage]]] = [:]
        for index in 0..<90 {
            let users = Array(devicesOfUser.keys.sorted().shuffled(using: &generator).prefix(Int.random(in: 1...3, using: &generator)))
            let id = "s\(seed)-e\(index)"
            // A third of the events are a campaign's, on the bulk lane.
            let topic = index % 3 == 2 ? Self.topics.bulkRequests : Self.topics.requests
            let partition = partitions[topic]![index % partitions[topic]!.count]
            let list = users.map { "\"\($0)\"" }.joined(separator: ",")
            let json =
                #"{"id":"\#(id)","user_ids":[\#(list)],"topic":"\#(Self.app)","payload":{"aps":{"alert":"hi"}},"#
                + #""fcm":{"package":"\#(Self.package)","message":{"data":{"event":"\#(id)"}}},"#
                + #""webpush":{"app":"\#(Self.webApp)","message":"\#(id)"}}"#
            let offset = Int64(messages[topic, default: [:]][partition, default: []].count)
            messages[topic, default: [:]][partition, default: []].append(
                KafkaMessage(
                    topic: topic, partition: partition, offset: offset, key: Array(id.utf8), value: Array(json.utf8),
                    timestampMilliseconds: index % 4 == 3 ? nil : Self.midnightMilliseconds - 45 + Int64(index)))
            events.append(
                SimulatedEvent(
                    id: id, topic: topic, partition: partition, offset: offset, devices: users.flatMap { devicesOfUser[$0] ?? [] },
                    isUntimed: index % 4 == 3))
        }
        // The previous release read push.requests.bulk in the shared group and committed a few of
        // each partition's records: the bulk lane's new group has no offsets of its own yet.
        let committedBeforeTheUpgrade = Dictionary(
            uniqueKeysWithValues: partitions[Self.topics.bulkRequests]!.map { ($0, Int64.random(in: 0...4, using: &generator)) })
        for index in events.indices where events[index].topic == Self.topics.bulkRequests {
            events[index].wasDeliveredBeforeTheUpgrade = events[index].offset < committedBeforeTheUpgrade[events[index].partition]!
        }
        self.events = events
        eventsByID = Dictionary(uniqueKeysWithValues: events.map { ($0.id, $0) })
        eventIDOfAPNSID = Dictionary(
            events.flatMap { event in
                event.devices.filter { $0.hasPrefix("apns ") }.map { (NotificationID.derive(eventID: event.id, token: String($0.dropFirst(5))), event.id) }
            }
        ) { first, _ in first }
        postgres = SimulatedPostgres(registry: registry, seed: seed)
        apns = SimulatedAPNs(seed: seed)
        fcm = SimulatedFCM(seed: seed)
        webPush = SimulatedWebPush(seed: seed)
        groups = [
            SimulatedGroup(topic: Self.topics.requests, messages: messages[Self.topics.requests] ?? [:]),
            SimulatedGroup(
                topic: Self.topics.bulkRequests, messages: messages[Self.topics.bulkRequests] ?? [:],
                committedByEarlierGroup: committedBeforeTheUpgrade),
        ]
        for group in groups {
            group.onCommit = { [weak self] topic, partition, offset in self?.checkCommit(topic: topic, partition: partition, below: offset) }
            group.onDrained = { [weak self] topic, partition, duration in self?.checkDrain(topic: topic, partition: partition, took: duration) }
            group.onViolation = { [weak self] violation in self?.record(violation) }
        }
    }

    /// A pipeline instance of the members `urgent` and `bulk`, fast to retry and to drain.
    func pipeline(urgent: SimulatedMember, bulk: SimulatedMember) -> NotificationPipeline {
        var configuration = PipelineConfiguration()
        // The load-shedding pause scaled down with the backoff: a fifth of the answers are 503s
        // and time-outs, which would otherwise slow every send by seconds.
        configuration.retry = RetryPolicy(
            maxAttempts: 6, deliveryDeadline: .seconds(30), requestTimeout: .milliseconds(300), initialBackoff: .milliseconds(5),
            maximumBackoff: .milliseconds(40),
            loadShedding: LoadSheddingPolicy(initialPause: .milliseconds(2), maximumPause: .milliseconds(40), halfLife: .milliseconds(100)))
        // Google's minute after QUOTA_EXCEEDED, scaled down as the backoff is: at a minute, the
        // project's gate holds every Android send of the run until its delivery deadline.
        configuration.retry.quotaExceededWait = .milliseconds(20)
        configuration.maxConcurrentSends = Self.maxConcurrentSends
        configuration.commitInterval = .milliseconds(10)
        configuration.revocationDrainTimeout = Self.revocationDrainBound
        configuration.pollBatchSize = 8
        configuration.bulkMaxRate = 500
        configuration.storeOperationTimeout = SimulatedPostgres.timeLimit
        configuration.storeRetry = Backoff(initial: .milliseconds(5), maximum: .milliseconds(40))
        var logger = Logger(label: "simulation")
        // HERALD_PIPELINE_SIMULATION_LOG=<level> prints the members' logs (the seed and slot in each line).
        logger.logLevel = ProcessInfo.processInfo.environment["HERALD_PIPELINE_SIMULATION_LOG"].flatMap(Logger.Level.init(rawValue:)) ?? .critical
        logger[metadataKey: "member"] = "s\(seed)/\(urgent.slot)"
        let services = MemberPushServices(world: self, members: [urgent, bulk])
        let pipeline = NotificationPipeline(
            configuration: configuration, source: urgent, bulkSource: bulk, publisher: publisher, store: postgres, ledger: postgres,
            apns: services, fcm: services, webPush: services, taskExecutor: scheduler, logger: logger)
        pipelines.withLock { $0.append(WeakPipeline(pipeline: pipeline)) }
        return pipeline
    }

    /// Runs the seed's moves while the events are delivered, then waits until every partition is
    /// committed to its end; returns what broke.
    func run() async throws -> [String] {
        var generator = SeededRandomNumberGenerator(seed: seed ^ 0xD1B5_4A32_D192_ED03)
        var crashes = 0
        var running: [Int: NotificationPipeline] = [:]
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            func start(slot: Int) {
                let urgent = groups[0].startMember(slot: slot)
                let bulk = groups[1].startMember(slot: slot)
                let pipeline = pipeline(urgent: urgent, bulk: bulk)
                urgent.listener = pipeline
                bulk.listener = pipeline
                running[slot] = pipeline
                stops.withLock { $0[slot] = nil }
                tasks.addTask {
                    try? await testGracefulShutdown { stop in
                        self.stops.withLock { $0[slot] = stop }
                        try await pipeline.runUntilCrashed(urgent)
                    }
                }
            }
            for slot in 0..<2 { start(slot: slot) }
            for group in groups {
                for (index, partition) in group.partitions.enumerated() { group.assign(partition, toSlot: index % 2) }
            }
            for group in groups { group.release(messagesPerPartition: 10) }
            for move in 0..<12 {
                // An NTP correction steps the wall clock back across the midnight it passed.
                if move == 6 { scheduler.stepWallClock(by: .milliseconds(-800)) }
                try await PipelineClock().sleep(for: .milliseconds(Int.random(in: 20...120, using: &generator)))
                for group in groups { group.release(messagesPerPartition: 10) }
                // The move lands while what was just released is being delivered.
                try await PipelineClock().sleep(for: .milliseconds(Int.random(in: 2...20, using: &generator)))
                let group = groups[Int.random(in: 0..<3, using: &generator) == 2 ? 1 : 0]
                let partition = group.partitions.randomElement(using: &generator)!
                switch Int.random(in: 0..<10, using: &generator) {
                case 0..<5:
                    // A retry storm on the partition as the group revokes it: its sends wait
                    // for their Retry-After when the drain begins.
                    storm.withLock { $0 = (group.topic, partition) }
                    try await PipelineClock().sleep(for: .milliseconds(30))
                    await group.move(partition, lost: false)
                    storm.withLock { $0 = nil }
                case 5..<7:
                    await group.move(partition, lost: true)
                case 7..<9:
                    let slot = Int.random(in: 0..<2, using: &generator)
                    crashes += 1
                    for group in groups { group.crash(slot: slot) }
                    start(slot: slot)
                default:
                    // A rollout replaces a member: SIGTERM (a graceful stop: its lanes finish
                    // what is in flight, commit and leave, the group handing their partitions
                    // to the other member), then a new member in its place. Repeats nothing.
                    let slot = Int.random(in: 0..<2, using: &generator)
                    guard let stop = stops.withLock({ $0[slot] }) else { break }
                    stop.triggerGracefulShutdown()
                    let members = groups.map { $0.member(slot: slot) }
                    let bound = PipelineClock.now + .seconds(30)
                    while !members.allSatisfy(\.hasEnded), PipelineClock.now < bound { try await PipelineClock().sleep(for: .milliseconds(5)) }
                    if !members.allSatisfy(\.hasEnded) {
                        record("member \(slot)'s graceful stop did not end within 30 s")
                        crashes += 1
                        for group in groups { group.crash(slot: slot) }
                    }
                    start(slot: slot)
                }
            }
            for group in groups { group.release(messagesPerPartition: 1_000) }
            let deadline = PipelineClock.now + .seconds(60)
            while !groups.allSatisfy(\.isCommittedToTheEnd), PipelineClock.now < deadline { try await PipelineClock().sleep(for: .milliseconds(20)) }
            for group in groups where !group.isCommittedToTheEnd {
                record("not every partition of \(group.topic) was committed to its end: \(group.committedSummary)")
            }
            // Every message is finished; what a member still holds in flight is a lost
            // partition's request, which ends within its time-out (and its result is published
            // again). Within two seconds nothing is left: anything then is leaked.
            let settled = PipelineClock.now + .seconds(2)
            while running.values.contains(where: { !$0.heldInFlight.isEmpty }), PipelineClock.now < settled {
                try await PipelineClock().sleep(for: .milliseconds(5))
            }
            for (slot, pipeline) in running.sorted(by: { $0.key < $1.key }) where !pipeline.heldInFlight.isEmpty {
                record("member \(slot) still holds \(pipeline.heldInFlight.sorted { $0.key < $1.key }) with every message finished")
            }
            for group in groups { group.stopEveryMember() }
            tasks.cancelAll()
        }
        checkResults(crashes: crashes)
        return violations.withLock { $0 }
    }

    /// A send that `member` started for `eventID` after it was told its partition was revoked
    /// or lost: its fence should have stopped it.
    func checkSendStart(eventID: String, by members: [SimulatedMember]) {
        guard let event = eventsByID[eventID], let member = members.first(where: { $0.topic == event.topic }) else { return }
        if member.wasToldItHasGone(event.partition) {
            lateSends.withLock { $0.append("\(event.id) of \(event.topic)/\(event.partition)") }
        }
    }

    /// Whether the partition of `eventID`'s record is in a retry storm.
    func isInStorm(eventID: String) -> Bool {
        guard let event = eventsByID[eventID] else { return false }
        return storm.withLock { $0.map { $0.topic == event.topic && $0.partition == event.partition } ?? false }
    }

    /// A revocation that drained for its whole bound waited for sends that should have been
    /// given up: the drain fences the partition's messages and wakes every send waiting to
    /// retry, for a permit or for its pace (docs/design.md, "The fence: revoked partitions").
    private func checkDrain(topic: String, partition: Int32, took duration: Duration) {
        if duration >= Self.revocationDrainBound * 0.9 {
            record("the revocation of \(topic)/\(partition) drained for \(duration), its whole bound: sends waiting to retry were not given up")
        }
    }

    func record(_ violation: String) {
        violations.withLock { $0.append(violation) }
    }

    /// Every result of every message below `offset` of `partition` of `topic` is published.
    private func checkCommit(topic: String, partition: Int32, below offset: Int64) {
        let published = publishedResults()
        for event in events where event.topic == topic && event.partition == partition && event.offset < offset && !event.wasDeliveredBeforeTheUpgrade {
            let missing = Set(event.devices).subtracting(published[event.id, default: [:]].keys)
            if !missing.isEmpty { record("offset \(offset) of \(topic)/\(partition) committed before \(event.id)'s results for \(missing.count) devices") }
        }
    }

    /// Each event's results by device (`<platform> <token>`): every copy's bytes. Each record is
    /// read once: the commits' checks ask after each commit.
    private func publishedResults() -> [String: [String: [[UInt8]]]] {
        // Every record (a copy of the array's reference), of which only the new ones are read.
        let published = publisher.published
        return resultsRead.withLock { read in
            for message in published.dropFirst(read.count) where message.topic == Self.topics.results {
                guard let value = message.value, let json = try? JSONParser.parse(value), let event = json["event_id"]?.stringValue,
                    let token = json["token"]?.stringValue, let platform = json["platform"]?.stringValue
                else { continue }
                read.results[event, default: [:]]["\(platform) \(token)", default: []].append(value)
            }
            read.count = published.count
            return read.results
        }
    }

    /// How many times `event` reached `device` (`<platform> <token>`).
    private func pushCount(of event: SimulatedEvent, to device: String) -> Int {
        let parts = device.split(separator: " ", maxSplits: 1)
        let token = String(parts[1])
        return switch parts[0] {
        case "apns": apns.delivered(event: event.id, token: token)
        case "fcm": fcm.delivered(event: event.id, token: token)
        default: webPush.delivered(event: event.id, endpoint: token)
        }
    }

    private func checkResults(crashes: Int) {
        let published = publishedResults()
        var repeated = 0
        var deliveredByPlatform: [String: Int] = [:]
        for event in events {
            if event.wasDeliveredBeforeTheUpgrade {
                let pushes = event.devices.map { pushCount(of: event, to: $0) }.reduce(0, +)
                if pushes > 0 || published[event.id] != nil {
                    record("\(event.id): read again by the bulk lane's new group below the previous release's committed offset (\(pushes) pushes)")
                }
                continue
            }
            for device in event.devices {
                let copies = published[event.id]?[device] ?? []
                if copies.isEmpty {
                    let others = published[event.id, default: [:]].map { "\($0.key.prefix(12))… ×\($0.value.count)" }.sorted()
                    record("\(event.id): no result for \(device.prefix(12))… (its results: \(others))")
                }
                // An untimed record's ledger day is its poll's: two members that poll it on both
                // sides of a midnight at once (a loss, a crash) record under two days, and both
                // outcomes stand (docs/design.md, "The ledger"). Only a legacy broker's record
                // (message format v0) has no timestamp.
                if Set(copies).count > 1, !event.isUntimed { record("\(event.id): results that differ for one device") }
                let platform = String(device.split(separator: " ")[0])
                let pushes = pushCount(of: event, to: device)
                repeated += max(0, pushes - 1)
                // A rebalance with a drain and a graceful stop push nothing twice: a second push
                // is a crash's or a loss's only. (Either may publish a result again, byte for
                // byte: the new owner republishes what a message given up at its fence recorded.)
                if pushes > 1, !groups.first(where: { $0.topic == event.topic })!.wasExposed(event.partition, offset: event.offset) {
                    record("\(event.id): pushed \(pushes) times to \(device.prefix(12))…, which no crash or loss exposed")
                }
                deliveredByPlatform[platform, default: 0] += pushes
            }
        }
        // Seven in ten answers accept: a platform none of whose pushes arrived was never sent to
        // (its results would all be refusals Herald made up).
        for (platform, delivered) in deliveredByPlatform.sorted(by: { $0.key < $1.key }) where delivered == 0 {
            record("no \(platform) device received anything")
        }
        let lost = groups.map(\.lostCount).reduce(0, +)
        // A send that passed its fence the moment before the fence closed starts after it: at
        // most the send permits per move. One that starts later means the fence did not close.
        let moves = groups.map(\.moveCount).reduce(0, +)
        let late = lateSends.withLock { $0 }
        if late.count > moves * Self.maxConcurrentSends {
            record("\(late.count) sends started after their member gave the partition up, with \(moves) moves: \(late.prefix(4))")
        }
        let allowed = (crashes + lost) * Self.maxConcurrentSends
        if repeated > allowed {
            record("\(repeated) devices pushed twice with \(crashes) crashes and \(lost) lost partitions (at most \(allowed))")
        }
    }
}

extension NotificationPipeline {
    /// Runs until its member crashes or the run ends: then cancelled at once, as a SIGKILL ends a
    /// process (its member polls nothing more and commits nothing from then on).
    fileprivate func runUntilCrashed(_ member: SimulatedMember) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await self.run() }
            group.addTask { await member.waitUntilCrashed() }
            try await group.next()
            group.cancelAll()
        }
    }
}

/// One pipeline's push services: each send is checked (``SimulatedWorld/checkSendStart(eventID:by:)``),
/// waits for a stream of the instance's own connection to the service (``SimulatedStreams``), and
/// is passed on to the world's simulated APNs, FCM or web push service.
final class MemberPushServices: APNSClientProtocol, FCMClientProtocol, WebPushClientProtocol {
    private unowned let world: SimulatedWorld
    private let members: [SimulatedMember]
    private let apnsStreams: SimulatedStreams
    private let fcmStreams: SimulatedStreams
    private let webPushStreams: SimulatedStreams

    init(world: SimulatedWorld, members: [SimulatedMember]) {
        self.world = world
        self.members = members
        let report: @Sendable (String) -> Void = { [weak world] violation in world?.record(violation) }
        // Fewer streams than the send permits; one for FCM and the push service, which see a
        // third as many sends as APNs, so their requests wait too.
        apnsStreams = SimulatedStreams(service: "APNs", streamLimit: 3, onViolation: report)
        fcmStreams = SimulatedStreams(service: "FCM", streamLimit: 1, onViolation: report)
        webPushStreams = SimulatedStreams(service: "web push", streamLimit: 1, onViolation: report)
    }

    func send(_ request: APNSRequest, environment: APNSEnvironment, deadline: ContinuousClock.Instant) async throws -> APNSResponse {
        world.checkSendStart(eventID: world.eventIDOfAPNSID[request.apnsID] ?? "", by: members)
        return try await apnsStreams.withStream(precedence: request.precedence) {
            try await world.apns.send(request, environment: environment, deadline: deadline)
        }
    }

    func send(_ request: FCMRequest, deadline: ContinuousClock.Instant) async throws -> FCMResponse {
        let eventID = SimulatedFCM.eventID(of: request)
        world.checkSendStart(eventID: eventID, by: members)
        return try await fcmStreams.withStream(precedence: request.precedence) {
            // In a storm: UNAVAILABLE with Retry-After, which a sender must honour
            // (firebase.google.com/docs/cloud-messaging/scale-fcm#errors: "503 ... honor the Retry-After header").
            if world.isInStorm(eventID: eventID) {
                return FCMResponse(
                    status: 503, error: FCMErrorBody(code: 503, status: "UNAVAILABLE", errorCode: .unavailable),
                    retryAfter: SimulatedWorld.stormRetryAfter)
            }
            return try await world.fcm.send(request, deadline: deadline)
        }
    }

    func send(_ request: WebPushRequest, deadline: ContinuousClock.Instant) async throws -> WebPushResponse {
        let eventID = String(decoding: request.plaintext, as: UTF8.self)
        world.checkSendStart(eventID: eventID, by: members)
        return try await webPushStreams.withStream(precedence: request.precedence) {
            // In a storm: 429 with Retry-After (RFC 8030, section 8.4: a push service that limits
            // its rate answers 429 and may say when to try again).
            if world.isInStorm(eventID: eventID) { return WebPushResponse(status: 429, retryAfter: SimulatedWorld.stormRetryAfter) }
            return try await world.webPush.send(request, deadline: deadline)
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
        var generator = SeededRandomNumberGenerator(seed: seed ^ UInt64(truncatingIfNeeded: "\(key)#\(attempt)".hashValueStable))
        try await PipelineClock().sleep(for: .milliseconds(Int.random(in: 1...15, using: &generator)))
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
        // Above a GOAWAY's last stream id: refused before APNs read it.
        case 91..<95: throw TransportError.streamReset("simulated GOAWAY")
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

    /// The event a request is for: its message's `data.event`.
    static func eventID(of request: FCMRequest) -> String {
        JSONValue.object(request.message.members)["data"]?["event"]?.stringValue ?? ""
    }

    func send(_ request: FCMRequest, deadline: ContinuousClock.Instant) async throws -> FCMResponse {
        let key = "\(Self.eventID(of: request))|\(request.target.value)"
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
        case 91..<95: throw TransportError.streamReset("simulated GOAWAY")
        default: throw TransportError.deadlineExceeded("simulated time-out")
        }
    }

    /// How often FCM accepted the event `event` for `token` (200).
    func delivered(event: String, token: String) -> Int {
        answers.acceptedCount("\(event)|\(token)")
    }
}

/// A web push service as the seed decides, as ``SimulatedAPNs`` does for APNs; the message's
/// plaintext names its event. Its answers are RFC 8030's: 201 with the message's `Location`;
/// 413 (final); 429 with Retry-After; 503.
final class SimulatedWebPush: WebPushClientProtocol {
    private let answers: SeededAnswers

    init(seed: UInt64) { answers = SeededAnswers(seed: seed &+ 0x9E37_79B9) }

    func send(_ request: WebPushRequest, deadline: ContinuousClock.Instant) async throws -> WebPushResponse {
        let key = "\(String(decoding: request.plaintext, as: UTF8.self))|\(request.subscription.endpoint)"
        let (attempt, choice) = try await answers.nextAttempt(key)
        switch choice {
        case 0..<70:
            answers.accepted(key)
            return WebPushResponse(status: 201, location: "https://fcm.googleapis.com/m/\(attempt)")
        case 70..<78: return WebPushResponse(status: 429, retryAfter: .milliseconds(5))
        case 78..<86: return WebPushResponse(status: 503)
        case 86..<91: return WebPushResponse(status: 413)
        case 91..<95: throw TransportError.streamReset("simulated GOAWAY")
        default: throw TransportError.deadlineExceeded("simulated time-out")
        }
    }

    /// How often the service accepted the event `event` for `endpoint` (201).
    func delivered(event: String, endpoint: String) -> Int {
        answers.acceptedCount("\(event)|\(endpoint)")
    }
}

/// PostgreSQL as the seed decides, in front of the shared registry and ledger: each call answers
/// after a drawn latency (80 in 100), fails before it lands (8), lands and then fails, as when
/// the connection is lost before the answer (6), or runs past the pipeline's time limit, as on a
/// dead connection, and lands when it ends unless it was cancelled first (6).
///
final class SimulatedPostgres: DeviceTokenStore, DeliveryLedger {
    /// The pipeline's time limit on one call (its `storeOperationTimeout`).
    static let timeLimit: Duration = .milliseconds(100)

    struct ConnectionLost: Error {}

    private let registry: InMemoryTokenRegistry
    private let answers: SeededAnswers

    init(registry: InMemoryTokenRegistry, seed: UInt64) {
        self.registry = registry
        answers = SeededAnswers(seed: seed &+ 0x5BD1_E995)
    }

    private func call<Answer>(_ key: String, _ body: () async throws -> Answer) async throws -> Answer {
        switch try await answers.nextAttempt(key).choice {
        case 0..<80: return try await body()
        case 80..<88: throw ConnectionLost()
        case 88..<94:
            _ = try await body()
            throw ConnectionLost()
        default:
            try await PipelineClock().sleep(for: Self.timeLimit * 2)
            return try await body()
        }
    }

    func activeDevices(apnsTopic: String?, fcmPackage: String?, webPushApp: String?, userIDs: [String]) async throws -> [String: [DeviceToken]] {
        try await call("devices|\(userIDs.sorted())") {
            try await registry.activeDevices(apnsTopic: apnsTopic, fcmPackage: fcmPackage, webPushApp: webPushApp, userIDs: userIDs)
        }
    }

    func apply(_ update: TokenRegistryUpdate) async throws -> Bool {
        try await call("apply|\(update.token)") { try await registry.apply(update) }
    }

    func markUnregistered(topic: String, token: String, at time: Timestamp) async throws -> Bool {
        try await call("mark|\(token)") { try await registry.markUnregistered(topic: topic, token: token, at: time) }
    }

    func failure(of error: any Error) -> StoreFailure { .transient("connection") }

    func recordedDeliveries(of events: [LedgerEvent]) async throws -> [LedgerEvent: [LedgerTarget: RecordedDelivery]] {
        try await call("ledger|\(events.map(\.eventID).sorted())") { try await registry.recordedDeliveries(of: events) }
    }

    func record(_ batch: [(delivery: RecordedDelivery, mark: UnregisterMark?)]) async throws -> [RecordedDelivery] {
        try await call("record|\(batch.map { "\($0.delivery.event.eventID) \($0.delivery.token)" }.sorted())") { try await registry.record(batch) }
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
    // @unchecked Sendable: every stored property is behind `state` (a Mutex) or a constant, except
    // `onCommit`, `onDrained` and `onViolation`, which are set once in the world's initializer before any member exists and only
    // read after.
    private struct State {
        var messages: [Int32: [KafkaMessage]]
        var released: [Int32: Int] = [:]
        var committed: [Int32: Int64] = [:]
        var owner: [Int32: SimulatedMember] = [:]
        var members: [Int: SimulatedMember] = [:]
        var lost = 0
        var moves = 0
        /// Where a crash or a loss let a new owner read records the old one may have delivered:
        /// each partition's committed offset then.
        var exposures: [(partition: Int32, from: Int64)] = []
        /// Polls that found nothing, waiting for records to be released or partitions assigned, by ID.
        var pollWaiters: [Int: CheckedContinuation<Void, Never>] = [:]
        var nextPollWaiterID = 0
    }

    private let state: Mutex<State>
    /// The topic the group's members read.
    let topic: String
    let partitions: [Int32]
    /// What the group that read the topic before this one committed (an upgrade gave the topic a
    /// group of its own), by partition.
    let committedByEarlierGroup: [Int32: Int64]
    var onCommit: @Sendable (String, Int32, Int64) -> Void = { _, _, _ in }
    /// Told how long each revocation's drain took.
    var onDrained: @Sendable (String, Int32, Duration) -> Void = { _, _, _ in }
    /// Told what broke the group's rules.
    var onViolation: @Sendable (String) -> Void = { _ in }

    init(topic: String, messages: [Int32: [KafkaMessage]], committedByEarlierGroup: [Int32: Int64] = [:]) {
        self.topic = topic
        self.committedByEarlierGroup = committedByEarlierGroup
        partitions = messages.keys.sorted()
        state = Mutex(State(messages: messages))
    }

    /// A new member in `slot`.
    func startMember(slot: Int) -> SimulatedMember {
        let member = SimulatedMember(slot: slot, group: self)
        state.withLock { $0.members[slot] = member }
        return member
    }

    /// The member in `slot`.
    func member(slot: Int) -> SimulatedMember {
        state.withLock { $0.members[slot]! }
    }

    /// `member` leaves the group, as `rd_kafka_consumer_close` does at a graceful stop: each of
    /// its partitions revoked through its callback (drained and committed) on its queue, and
    /// then given to the other slot's member; the member ends.
    func leave(_ member: SimulatedMember) async {
        let partitions = state.withLock { state in state.owner.filter { $0.value === member }.keys.sorted() }
        for partition in partitions {
            await member.turns.take { member.revoke(partition, lost: false) }
            assign(partition, toSlot: 1 - member.slot)
        }
        member.leftGroup()
    }

    /// Makes up to `count` more records of each partition readable.
    func release(messagesPerPartition count: Int) {
        state.withLock { state in
            for (partition, messages) in state.messages {
                state.released[partition] = min(messages.count, state.released[partition, default: 0] + count)
            }
        }
        wakePolls()
    }

    /// Returns once records are released or a partition is assigned, or after `timeout`, or when
    /// cancelled: a poll that found nothing blocks as librdkafka's does, not in a loop.
    func waitForRecords(timeout: Duration) async {
        let id = state.withLock { state in
            state.nextPollWaiterID += 1
            return state.nextPollWaiterID
        }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { try? await PipelineClock().sleep(for: timeout) }
            group.addTask {
                await withTaskCancellationHandler {
                    await withCheckedContinuation { continuation in
                        let isCancelled = self.state.withLock { state in
                            if Task.isCancelled { return true }
                            state.pollWaiters[id] = continuation
                            return false
                        }
                        if isCancelled { continuation.resume() }
                    }
                } onCancel: {
                    self.state.withLock { $0.pollWaiters.removeValue(forKey: id) }?.resume()
                }
            }
            await group.next()
            group.cancelAll()
        }
    }

    /// Wakes every poll waiting for records, oldest first.
    private func wakePolls() {
        let waiters = state.withLock { state in
            defer { state.pollWaiters = [:] }
            return state.pollWaiters.sorted { $0.key < $1.key }.map(\.value)
        }
        for waiter in waiters { waiter.resume() }
    }

    var lostCount: Int { state.withLock { $0.lost } }

    /// Whether a crash or a loss let a second member read the record at `offset` of `partition`
    /// before the first one's delivery of it was committed.
    func wasExposed(_ partition: Int32, offset: Int64) -> Bool {
        state.withLock { $0.exposures.contains { $0.partition == partition && $0.from <= offset } }
    }

    /// Partitions revoked or lost so far.
    var moveCount: Int { state.withLock { $0.moves } }

    var isCommittedToTheEnd: Bool {
        state.withLock { state in state.messages.allSatisfy { state.committed[$0.key, default: 0] == Int64($0.value.count) } }
    }

    var committedSummary: String {
        state.withLock { state in state.messages.keys.sorted().map { "p\($0): \(state.committed[$0, default: 0])/\(state.messages[$0]!.count)" } }
            .joined(separator: ", ")
    }

    /// Gives `partition` to the member in `slot` with the steps the shipped callback takes for
    /// an assignment (``RebalanceStep/steps(for:assignmentLost:)``): it reads the partition from
    /// its committed offset, or, when the group never committed one, from where the shipped seed
    /// starts it (``seededStartOffsets(committed:committedByEarlierGroup:)``), or from its start.
    func assign(_ partition: Int32, toSlot slot: Int) {
        let (member, committed) = state.withLock { state in
            let member = state.members[slot]!
            state.owner[partition] = member
            return (member, state.committed[partition])
        }
        var from = committed ?? 0
        for step in RebalanceStep.steps(for: .assign, assignmentLost: false) {
            switch step {
            case .seedUncommittedOffsets:
                let topicPartition = KafkaTopicPartition(topic: topic, partition: partition)
                let seeded = seededStartOffsets(
                    committed: [topicPartition: committed ?? -1001],
                    committedByEarlierGroup: committedByEarlierGroup[partition].map { [topicPartition: $0] } ?? [:])
                from = seeded[topicPartition] ?? from
            case .assign, .reportAssigned:
                // Both in one: the listener hears of the partition before any record of it is polled.
                continue
            case .reportLost, .drainAndCommit, .unassign, .forgetAssignment:
                reportStep("\(step) for an assignment of \(topic)/\(partition)")
            }
        }
        member.assigned(partition, from: from)
        wakePolls()
    }

    /// Moves `partition` to the other slot's member: revoked with a drain (on a thread of its own,
    /// as librdkafka's callback runs), its returned offsets committed, and then assigned; or lost:
    /// the group gave it to the other member after a session time-out, which reads it at once,
    /// and the old member learns it a moment later (nothing of its is committed from then on).
    func move(_ partition: Int32, lost: Bool) async {
        guard let from = state.withLock({ $0.owner[partition] }) else { return }
        state.withLock { $0.moves += 1 }
        if lost {
            state.withLock { state in
                state.lost += 1
                state.exposures.append((partition, state.committed[partition, default: 0]))
            }
            assign(partition, toSlot: 1 - from.slot)
            try? await PipelineClock().sleep(for: .milliseconds(5))
        }
        let began = PipelineClock.now
        await from.turns.take { from.revoke(partition, lost: lost) }
        if !lost { onDrained(topic, partition, PipelineClock.now - began) }
        if !lost { assign(partition, toSlot: 1 - from.slot) }
    }

    /// A rebalance step the callback decided that does not belong to the callback.
    func reportStep(_ step: String) { onViolation("the callback decided \(step)") }

    /// Crashes the member in `slot`: it ends at once, and after a session time-out its partitions
    /// go to the other slot's member from the committed offsets, with no revocation.
    func crash(slot: Int) {
        let (member, partitions) = state.withLock { state in
            let member = state.members[slot]!
            let partitions = state.owner.filter { $0.value === member }.keys.sorted()
            for partition in partitions { state.exposures.append((partition, state.committed[partition, default: 0])) }
            return (member, partitions)
        }
        member.end()
        for partition in partitions { assign(partition, toSlot: 1 - slot) }
    }

    /// Ends every member (the end of the run).
    func stopEveryMember() {
        // Each member holds its group: without letting go of them, neither is ever freed.
        let members = state.withLock { state in
            defer { (state.members, state.owner) = ([:], [:]) }
            return Array(state.members.values)
        }
        for member in members { member.end() }
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
            if member.hasLost(partition) {
                // The broker refuses it (a dead generation); the member should not have tried.
                onViolation("\(topic)/\(partition) was lost and its member committed offset \(offset) for it")
            }
            guard owned, !member.hasEnded else { throw SimulatedCommitRefused() }
            onCommit(topic, partition, offset)
            state.withLock { $0.committed[partition] = max($0.committed[partition, default: 0], offset) }
        }
    }
}

struct SimulatedCommitRefused: Error {}

/// One member of the group, the message source of one pipeline instance.
final class SimulatedMember: MessageSource {
    private struct State {
        var positions: [Int32: Int64] = [:]
        /// The partitions whose revocation or loss the listener was told of (and not given back since).
        var gone: Set<Int32> = []
        /// The partitions the group took from this member after a session time-out.
        var lost: Set<Int32> = []
        var listener: (any KafkaRebalanceListener)?
        var ended = false
        var crashed = false
        /// The waits for a crash (``waitUntilCrashed()``), by ID.
        var crashWaiters: [Int: CheckedContinuation<Void, Never>] = [:]
        var nextWaiterID = 0
    }

    let slot: Int
    private let group: SimulatedGroup
    private let state = Mutex(State())
    /// Where the rebalance callbacks and the commits run, one at a time, as librdkafka's run on
    /// the consumer's queue.
    let turns = SerialTurns()

    init(slot: Int, group: SimulatedGroup) {
        self.slot = slot
        self.group = group
    }

    var listener: (any KafkaRebalanceListener)? {
        get { state.withLock { $0.listener } }
        set { state.withLock { $0.listener = newValue } }
    }

    var hasEnded: Bool { state.withLock { $0.ended } }

    /// The topic this member reads.
    var topic: String { group.topic }

    func wasToldItHasGone(_ partition: Int32) -> Bool { state.withLock { $0.gone.contains(partition) } }

    /// Gives `partition` to this member from `offset`: the listener hears of it before any of its
    /// records can be polled, as librdkafka fetches a partition only once its rebalance callback
    /// has assigned it.
    func assigned(_ partition: Int32, from offset: Int64) {
        state.withLock { state in
            state.gone.remove(partition)
            state.lost.remove(partition)
        }
        listener?.partitionsAssigned([KafkaTopicPartition(topic: group.topic, partition: partition)])
        state.withLock { $0.positions[partition] = offset }
    }

    /// Revokes `partition` as librdkafka's callback does (blocking this thread for the drain), or
    /// reports it lost: performs the steps the shipped callback decides
    /// (``RebalanceStep/steps(for:assignmentLost:)``), with the group's answer to
    /// `rd_kafka_assignment_lost()`.
    func revoke(_ partition: Int32, lost: Bool) {
        let topicPartition = KafkaTopicPartition(topic: group.topic, partition: partition)
        if lost { state.withLock { _ = $0.lost.insert(partition) } }
        for step in RebalanceStep.steps(for: .revoke, assignmentLost: lost) {
            switch step {
            case .reportLost:
                // Lost means already working at the new owner: from the callback's start, nothing
                // more of it may be sent here.
                state.withLock { _ = $0.gone.insert(partition) }
                listener?.partitionsLost([topicPartition])
            case .drainAndCommit:
                if let offsets = listener?.partitionsRevoked([topicPartition]), !offsets.isEmpty {
                    try? group.commit(offsets, by: self)
                }
            case .unassign:
                state.withLock { state in
                    state.positions[partition] = nil
                    state.gone.insert(partition)
                }
            case .seedUncommittedOffsets, .assign, .reportAssigned, .forgetAssignment:
                group.reportStep("\(step) for a revocation of \(group.topic)/\(partition)")
            }
        }
    }

    /// Whether `partition` was lost by this member (and not given back since).
    func hasLost(_ partition: Int32) -> Bool { state.withLock { $0.lost.contains(partition) } }

    /// This member left the group (a graceful stop): it polls and commits nothing more, and its
    /// pipeline ends on its own.
    func leftGroup() {
        state.withLock { state in
            state.ended = true
            state.positions = [:]
            // Its pipeline holds it as its source: without this, neither is ever freed.
            state.listener = nil
        }
    }

    /// Ends this member at once, as a SIGKILL ends a process: it polls and commits nothing more,
    /// and its pipeline is cancelled (``waitUntilCrashed()``).
    func end() {
        let waiters = state.withLock { state in
            state.ended = true
            state.crashed = true
            state.positions = [:]
            state.listener = nil
            defer { state.crashWaiters = [:] }
            return state.crashWaiters.sorted { $0.key < $1.key }.map(\.value)
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Returns once ``end()`` was called, or when cancelled.
    func waitUntilCrashed() async {
        let id = state.withLock { state in
            state.nextWaiterID += 1
            return state.nextWaiterID
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let isOver = state.withLock { state in
                    if state.crashed || Task.isCancelled { return true }
                    state.crashWaiters[id] = continuation
                    return false
                }
                if isOver { continuation.resume() }
            }
        } onCancel: {
            state.withLock { $0.crashWaiters.removeValue(forKey: id) }?.resume()
        }
    }

    /// Waits up to `timeout` for the first record, then takes what else is readable, as the
    /// shipped consumer's poll does.
    func poll(maxMessages: Int, timeout: Duration) async throws -> [KafkaMessage] {
        let batch = take(maxMessages)
        guard batch.isEmpty else { return batch }
        await group.waitForRecords(timeout: timeout)
        try Task.checkCancellation()
        return take(maxMessages)
    }

    /// Up to `maxMessages` readable records of this member's partitions, from its positions on.
    private func take(_ maxMessages: Int) -> [KafkaMessage] {
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
        return batch
    }

    /// Commits on the member's queue, after any rebalance callback running, what the shipped
    /// consumer commits of `offsets` with the partitions the member holds then
    /// (``offsetsOfAssignedPartitions(_:assigned:)``).
    func commit(_ offsets: [KafkaTopicPartition: Int64]) async throws {
        try await turns.take {
            let assigned = state.withLock { state in
                Set(state.positions.keys.map { KafkaTopicPartition(topic: group.topic, partition: $0) })
            }
            try group.commit(offsetsOfAssignedPartitions(offsets, assigned: assigned), by: self)
        }
    }

    /// A member that ended hears nothing more: its pipeline may set itself as the listener once
    /// its member crashed, and would then never be freed.
    func setRebalanceListener(_ listener: any KafkaRebalanceListener) {
        state.withLock { state in
            if !state.ended { state.listener = listener }
        }
    }

    func pauseAll() async throws {}
    func resumeAll() async throws {}
    func leaveGroup() async { await group.leave(self) }
}

/// One at a time, first come first served: what librdkafka's consumer queue gives the rebalance
/// callbacks and commits of one member. A turn may block (a revocation's drain), and the
/// scheduler runs the rest of the world meanwhile.
final class SerialTurns: Sendable {
    private let state = Mutex<(isTaken: Bool, waiting: [CheckedContinuation<Void, Never>])>((false, []))

    /// Runs `body` once every turn asked for earlier has ended.
    func take<Value>(_ body: () throws -> Value) async rethrows -> Value {
        await withCheckedContinuation { (turn: CheckedContinuation<Void, Never>) in
            let isFree = state.withLock { state in
                if state.isTaken { state.waiting.append(turn) }
                defer { state.isTaken = true }
                return !state.isTaken
            }
            if isFree { turn.resume() }
        }
        defer {
            let next = state.withLock { state in
                if state.waiting.isEmpty { state.isTaken = false }
                return state.waiting.isEmpty ? nil : state.waiting.removeFirst()
            }
            next?.resume()
        }
        return try body()
    }
}

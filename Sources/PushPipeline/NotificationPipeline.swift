public import APNSCore
import PushCore
public import PushStores
public import FCMCore
public import WebPushCore
import Foundation
public import KafkaMessages
public import Logging
public import Metrics
public import ServiceLifecycle
import Synchronization
public import Tracing

/// Herald's core loop: reads push.requests, push.tokens and push.channels (the urgent lane) and
/// push.requests.bulk (the bulk lane), delivers each notification to every active device of its
/// users (or to its broadcast channel), publishes one result per device (or channel), answers
/// channel commands, dead-letters bad input, and commits a partition's offset only below
/// messages whose results are all published.
///
/// The lanes are two consumer group members (``InputLane``), each with its own fetch queue,
/// window and offsets; they share the claims, the ledger writer and the send permits,
/// where urgent sends are served first, and the bulk lane's sends are paced at
/// ``PipelineConfiguration/bulkMaxRate``.
///
/// Every terminal outcome is recorded in the delivery ledger before it is published, so a
/// redelivered event republishes the recorded results instead of pushing again.
public final class NotificationPipeline: Service, KafkaRebalanceListener, Sendable {
    private let configuration: PipelineConfiguration
    /// ``PushTopics/inputs`` by topic: what each record read is, and which lane reads it.
    private let inputsByTopic: [String: (input: PushTopics.Input, isBulk: Bool)]
    private let urgent: InputLane
    private let bulk: InputLane?
    private let publisher: ReliablePublisher
    private let storeOperations: StoreOperations
    private let tokenUpdates: TokenUpdates
    private let channelCommands: ChannelCommandProcessor
    private let requests: EventProcessor
    /// Everything of every message in flight: offsets, fences, claims, permits, batches.
    private let coordinator: DeliveryCoordinator
    private let logger: Logger
    private let taskExecutor: (any TaskExecutor)?
    /// What the pipeline did so far.
    public let metrics: PipelineMetrics

    /// Per assigned partition, the offset last committed by this member.
    public var committedOffsets: [KafkaTopicPartition: Int64] {
        coordinator.read { state in
            lanes.reduce(into: [:]) { offsets, lane in offsets.merge(state.committedOffsets(lane.priority)) { $1 } }
        }
    }

    /// True while the urgent lane's consume loop runs and its last poll succeeded (the bulk
    /// lane's state does not make Herald unready).
    public var isConsuming: Bool { urgent.consuming.load(ordering: .relaxed) }

    private var lanes: [InputLane] { [urgent] + (bulk.map { [$0] } ?? []) }

    /// The permanent broker errors (librdkafka's names) holding publishes right now: while any
    /// does, the partitions of the messages waiting on them cannot move on.
    public var publishBlockedBy: [String] { publisher.blockingCauses }

    /// What only work in flight holds (send permits, open poll batches, claimed sends, waiters of
    /// every kind, outcomes not yet recorded), by name, zeros left out: empty once every message
    /// this member started is finished, a leak otherwise.
    package var heldInFlight: [String: Int] { coordinator.read { $0.heldInFlight } }

    /// The permanent PostgreSQL errors (SQLSTATE) holding registry or ledger calls right now:
    /// while any does, the messages waiting on them cannot finish.
    public var storeBlockedBy: [String] { storeOperations.blockingCauses }

    /// `source` reads push.requests, push.tokens and push.channels; `bulkSource`, another member
    /// of the same group, reads push.requests.bulk (nil: no bulk lane).
    /// `broadcastAPNS` sends broadcasts to channels (default: `apns`); `channelManagementAPNS`
    /// reaches the channel management hosts for push.channels (without one, each command is
    /// answered `rejected`, `ChannelManagementUnavailable`); `fcm` sends to Android devices
    /// (without one, each is answered `rejected`, `NoCredentialForPackage`); `webPush` to
    /// browsers (without one, `rejected`, `NoCredentialForApp`). `taskExecutor`,
    /// when given, runs every task of the pipeline (`herald run` gives the event loop of its
    /// PostgreSQL connections; nil: Swift's global executor).
    public init(
        configuration: PipelineConfiguration,
        source: any MessageSource,
        bulkSource: (any MessageSource)? = nil,
        publisher: any MessagePublisher,
        store: any DeviceTokenStore,
        ledger: any DeliveryLedger,
        apns: any APNSClientProtocol,
        broadcastAPNS: (any APNSClientProtocol)? = nil,
        channelManagementAPNS: (any APNSClientProtocol)? = nil,
        fcm: (any FCMClientProtocol)? = nil,
        webPush: (any WebPushClientProtocol)? = nil,
        metricsFactory: any MetricsFactory = MetricsSystem.factory,
        tracer: (any Tracer)? = nil,
        taskExecutor: (any TaskExecutor)? = nil,
        logger: Logger
    ) {
        self.taskExecutor = taskExecutor
        let metrics = PipelineMetrics(factory: metricsFactory)
        self.metrics = metrics
        self.configuration = configuration
        self.inputsByTopic = Dictionary(configuration.topics.inputs.map { ($0.topic, ($0.input, $0.isBulk)) }) { first, _ in first }
        self.urgent = InputLane(priority: .urgent, source: source)
        self.bulk = bulkSource.map {
            InputLane(priority: .bulk, source: $0, pacer: configuration.bulkMaxRate > 0 ? SendPacer(perSecond: configuration.bulkMaxRate) : nil)
        }
        let reliablePublisher = ReliablePublisher(
            publisher: publisher, retriableBackoff: configuration.publishRetry, permanentBackoff: configuration.blockedPublishRetry,
            logger: logger, metrics: metrics)
        self.publisher = reliablePublisher
        let storeOperations = StoreOperations(
            timeout: configuration.storeOperationTimeout, maxAbandoned: configuration.maxAbandonedStoreOperations,
            backoff: configuration.storeRetry, permanentBackoff: configuration.storePermanentRetry, classify: { store.failure(of: $0) },
            taskExecutor: taskExecutor, metrics: metrics, logger: logger)
        self.storeOperations = storeOperations
        let coordinator = DeliveryCoordinator(
            permitLimit: configuration.maxConcurrentSends, bulkShare: configuration.bulkSendShare, outcomesPerWrite: configuration.maxOutcomesPerLedgerWrite)
        self.coordinator = coordinator
        let deadLetters = DeadLetters(topic: configuration.topics.deadLetters, publisher: reliablePublisher, metrics: metrics, logger: logger)
        self.tokenUpdates = TokenUpdates(
            store: store, storeOperations: storeOperations, deadLetters: deadLetters, webPushHosts: configuration.webPushHosts, logger: logger)
        self.channelCommands = ChannelCommandProcessor(
            manager: channelManagementAPNS.map { ChannelManager(client: $0, policy: configuration.retry, metrics: metrics.sender) },
            coordinator: coordinator,
            ledger: ledger,
            storeOperations: storeOperations,
            publisher: reliablePublisher,
            deadLetters: deadLetters,
            resultsTopic: configuration.topics.channelResults,
            metrics: metrics,
            logger: logger
        )
        self.requests = EventProcessor(
            configuration: configuration,
            publisher: reliablePublisher,
            store: store,
            ledger: ledger,
            storeOperations: storeOperations,
            deadLetters: deadLetters,
            sender: RetryingSender(
                client: apns, broadcastClient: broadcastAPNS, fcmClient: fcm, webPushClient: webPush, policy: configuration.retry,
                metrics: metrics.sender),
            coordinator: coordinator,
            tracer: tracer,
            metrics: metrics,
            logger: logger
        )
        self.logger = logger
    }

    /// Consumes until graceful shutdown, then lets in-flight messages finish (the service group's
    /// grace period bounds this), commits what finished and returns.
    ///
    /// At most `maxInFlightMessages` are processed at once: when the window is full the
    /// partitions are paused, and polling goes on (for rebalances and liveness) until it drains.
    /// The ledger writer runs beside the consume loop until the last in-flight message finished.
    public func run() async throws {
        try await withTaskExecutorPreference(taskExecutor) { try await runLanes() }
    }

    private func runLanes() async throws {
        for lane in lanes { lane.source.setRebalanceListener(self) }
        try await withGracefulShutdownHandler {
            try await withThrowingTaskGroup(of: Void.self) { group in
                // Above the deliveries' priority on the cooperative pool (an embedder's); the event
                // loop `herald run` gives the pipeline runs jobs first in first out.
                group.addTask(priority: .high) {
                    await self.requests.recordOutcomes()
                }
                group.addTask { await self.storeOperations.runTimeLimit() }
                defer { group.cancelAll() }
                // Each lane leaves its group as soon as its own work is committed: urgent
                // partitions never wait for the bulk lane's stop.
                try await withThrowingTaskGroup(of: Void.self) { consumers in
                    consumers.addTask {
                        try await self.consume(self.urgent)
                        await self.leave(self.urgent)
                    }
                    if let bulk {
                        // Below the urgent lane's work on the cooperative pool; on the event loop the
                        // lanes' precedence is the permits', the streams' and the ledger writer's.
                        consumers.addTask(priority: .low) {
                            try await self.consume(bulk)
                            await self.leave(bulk)
                        }
                    }
                    try await consumers.waitForAll()
                }
            }
        } onGracefulShutdown: {
            self.coordinator.beginStop(.urgent, givingUpUnstarted: false)
            // A paced campaign is not finished at a stop: its sends not started yet are given
            // up (the next owner sends them), so the stop waits only for requests in flight.
            if self.bulk != nil { self.coordinator.beginStop(.bulk, givingUpUnstarted: true) }
        }
    }

    /// At a graceful stop, once `lane` has nothing in flight: commits what it finished and
    /// leaves its group.
    private func leave(_ lane: InputLane) async {
        await commitFinished(lane)
        lane.consuming.store(false, ordering: .relaxed)
        await lane.source.leaveGroup()
        coordinator.left(lane.priority)
    }

    /// Polls and processes `lane`'s messages until graceful shutdown; returns once every message
    /// it started is finished or abandoned.
    private func consume(_ lane: InputLane) async throws {
        let source = lane.source
        try await withThrowingDiscardingTaskGroup { group in
            let clock = PipelineClock()
            var lastCommit = clock.now
            var paused = false
            while true {
                let (lifecycle, inFlight) = coordinator.read { ($0.lifecycle(lane.priority), $0.inFlightCount(lane.priority)) }
                guard lifecycle == .running else { break }
                var room = configuration.maxInFlightMessages - inFlight
                if room < refill, !paused {
                    room = await waitForRoom(lane)
                }
                if (room <= 0) != paused {
                    paused.toggle()
                    try await paused ? source.pauseAll() : source.resumeAll()
                }
                let messages = try await poll(lane, maxMessages: max(1, min(room, configuration.pollBatchSize)))
                let consumedAt = clock.now
                // Read once per poll: a record without a timestamp keeps this one for its ledger day.
                let polledAtMilliseconds = PipelineClock.wallMilliseconds
                var requests: [StartedMessage] = []
                // A partition revoked (or being drained) during the poll is the new owner's: not started here.
                for started in coordinator.start(messages, lane: lane.priority, polledAtMilliseconds: polledAtMilliseconds) {
                    let message = started.message
                    switch inputsByTopic[message.topic]?.input ?? .notificationEvents {
                    case .tokenUpdates:
                        group.addTask { if await self.tokenUpdates.process(message) { self.coordinator.finish(started) } }
                    case .channelCommands:
                        group.addTask { if await self.channelCommands.process(started) { self.coordinator.finish(started) } }
                    case .notificationEvents:
                        requests.append(started)
                    }
                }
                if !requests.isEmpty {
                    group.addTask { await self.requests.process(requests, from: lane, consumedAt: consumedAt) }
                }
                if lastCommit.duration(to: clock.now) >= configuration.commitInterval {
                    await commitFinished(lane)
                    lastCommit = clock.now
                    recordState(lane, paused: paused)
                }
            }
        }
        // The last results of the messages started are still being recorded and published.
        await coordinator.waitForRoom(lane.priority, inFlightAtMost: 0, patience: nil)
    }

    /// The room in the window worth a poll: a full poll batch, or half the window if smaller.
    /// Polling for less would split lookups into small batches.
    private var refill: Int {
        min(configuration.pollBatchSize, max(1, configuration.maxInFlightMessages / 2))
    }

    /// Waits, without polling, until the window has room for a refill or `windowFullPatience`
    /// passed; returns the room. Pausing at once would drop librdkafka's prefetched messages,
    /// and fetching them again after resuming costs a fetch round trip per window (measured:
    /// the window was consumed in steps of its size), so partitions are paused only when the
    /// window stays full, when APNs or PostgreSQL is slow or down and polling must go on for
    /// rebalances. The finish that makes the room wakes it.
    private func waitForRoom(_ lane: InputLane) async -> Int {
        await coordinator.waitForRoom(
            lane.priority,
            inFlightAtMost: configuration.maxInFlightMessages - refill,
            patience: configuration.windowFullPatience
        )
        return configuration.maxInFlightMessages - coordinator.read { $0.inFlightCount(lane.priority) }
    }

    public func partitionsAssigned(_ partitions: [KafkaTopicPartition]) {
        guard !partitions.isEmpty else { return }
        coordinator.assign(partitions, lane: lane(of: partitions).priority)
        metrics.recordRebalance(assigned: true)
    }

    /// The lane whose member was given or is losing `partitions` (each member reads one lane's
    /// topics); callers never ask for none, which names no lane.
    private func lane(of partitions: [KafkaTopicPartition]) -> InputLane {
        if let bulk, let topic = partitions.first?.topic, inputsByTopic[topic]?.isBulk == true { return bulk }
        return urgent
    }

    /// Sets the gauges of what is in flight now.
    private func recordState(_ lane: InputLane, paused: Bool) {
        let (messages, assigned) = coordinator.read { ($0.inFlightCount(lane.priority), $0.assignedCount(lane.priority)) }
        metrics.recordLaneState(lane.priority, inFlightMessages: messages, assigned: assigned, paused: paused)
        metrics.recordState(
            inFlightSends: requests.sendPermitsHeld,
            unrecordedOutcomes: requests.unrecordedOutcomes,
            abandonedStoreOperations: storeOperations.abandoned.count
        )
    }

    /// Runs on the consumer's poll thread (not the cooperative pool) while the pipeline's
    /// children keep running. From its start the partitions' sends are fenced: no APNs attempt
    /// starts for their messages any more (a send waiting for its pace, a permit or a retry is
    /// given up at once, and the new owner delivers it). It then waits, within a bound and woken
    /// by the last one, for the requests already in flight to be recorded and published, so the
    /// next owner starts from committed offsets and finds their outcomes in the ledger. Past the
    /// bound the partitions are revoked with messages unfinished; their requests end within the
    /// request timeout.
    public func partitionsRevoked(_ partitions: [KafkaTopicPartition]) -> [KafkaTopicPartition: Int64] {
        // An empty revocation (a cooperative rebalance that takes nothing from this member).
        guard !partitions.isEmpty else { return [:] }
        let lane = lane(of: partitions).priority
        let unfinished = coordinator.drain(partitions, lane: lane, timeout: configuration.revocationDrainTimeout)
        if unfinished > 0 {
            // Their sends start no further attempt (the fence, ``OffsetTracker/isFenced(_:generation:)``).
            logger.warning(
                "revoking partitions with unfinished messages: their sends stop, the new owner delivers them",
                metadata: [PipelineLoggingKeys.unfinished: "\(unfinished)"]
            )
        }
        metrics.recordRebalance(assigned: false)
        return coordinator.revoke(partitions, lane: lane)
    }

    /// Runs on the consumer's poll thread. The partitions are fenced and forgotten at once,
    /// without a drain and without a commit: their new owner may be working on them already, so
    /// a send that had not started is given up and nothing is committed under a dead generation.
    /// The only repeats are the requests in flight at this moment.
    public func partitionsLost(_ partitions: [KafkaTopicPartition]) {
        guard !partitions.isEmpty else { return }
        let lane = lane(of: partitions).priority
        let abandoned = coordinator.read { $0.inFlightCount(in: partitions, lane: lane) }
        _ = coordinator.revoke(partitions, lane: lane)
        logger.warning(
            "partitions lost without a revocation: their sends stop, nothing of theirs is committed",
            metadata: [PipelineLoggingKeys.unfinished: "\(abandoned)"]
        )
        metrics.recordRebalance(assigned: false)
    }

    private func poll(_ lane: InputLane, maxMessages: Int) async throws -> [KafkaMessage] {
        let started = PipelineClock.now
        defer { metrics.recordStage(.poll, since: started) }
        do {
            let messages = try await lane.source.poll(maxMessages: maxMessages, timeout: .milliseconds(100))
            lane.consuming.store(true, ordering: .relaxed)
            metrics.recordConsumed(messages.count, lane: lane.priority)
            return messages
        } catch {
            lane.consuming.store(false, ordering: .relaxed)
            throw error
        }
    }

    private func commitFinished(_ lane: InputLane) async {
        let offsets = coordinator.read { $0.committableOffsets(lane.priority) }
        guard !offsets.isEmpty else { return }
        let started = PipelineClock.now
        defer { metrics.recordStage(.offsetCommit, since: started) }
        do {
            try await lane.source.commit(offsets)
            coordinator.markCommitted(offsets, lane: lane.priority)
            metrics.recordCommit()
        } catch {
            // Not fatal: the same offsets (or later ones) are committed on the next round.
            logger.warning("offset commit failed", metadata: [PipelineLoggingKeys.error: "\(error)"])
        }
    }
}

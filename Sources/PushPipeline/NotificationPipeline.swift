public import APNSCore
public import DeviceTokenStore
import Foundation
import KafkaTransport
public import Logging
public import ServiceLifecycle
import Synchronization

/// Herald's core loop: reads push.requests and push.tokens, delivers each notification to every
/// active device of its users, publishes one result per device, dead-letters bad input, and
/// commits a partition's offset only below messages whose results are all published.
public final class NotificationPipeline: Service, Sendable {
    private let configuration: PipelineConfiguration
    private let source: any MessageSource
    private let publisher: any MessagePublisher
    private let store: any DeviceTokenStore
    private let sender: NotificationSender
    private let logger: Logger
    private let tracker = Mutex(OffsetTracker())
    private let isStopping = Atomic(false)
    private let consuming = Atomic(false)
    /// What the pipeline did so far.
    public let metrics = PipelineMetrics()

    /// True while the consume loop runs and its last poll succeeded.
    public var isConsuming: Bool { consuming.load(ordering: .relaxed) }

    public init(
        configuration: PipelineConfiguration,
        source: any MessageSource,
        publisher: any MessagePublisher,
        store: any DeviceTokenStore,
        apns: any APNSClientProtocol,
        logger: Logger
    ) {
        self.configuration = configuration
        self.source = source
        self.publisher = publisher
        self.store = store
        self.sender = NotificationSender(client: apns, policy: configuration.retry)
        self.logger = logger
    }

    /// Consumes until graceful shutdown, then lets in-flight messages finish (the service group's
    /// grace period bounds this), commits what finished and returns.
    public func run() async throws {
        let (completions, completionSignal) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        try await withGracefulShutdownHandler {
            try await withThrowingDiscardingTaskGroup { group in
                var completionWaiter = completions.makeAsyncIterator()
                let clock = ContinuousClock()
                var lastCommit = clock.now
                while !isStopping.load(ordering: .relaxed) {
                    let room = configuration.maxInFlightMessages - tracker.withLock { $0.inFlightCount }
                    if room > 0 {
                        let messages: [KafkaMessage]
                        do {
                            messages = try await source.poll(
                                maxMessages: min(room, configuration.pollBatchSize),
                                timeout: .milliseconds(100)
                            )
                        } catch {
                            consuming.store(false, ordering: .relaxed)
                            throw error
                        }
                        consuming.store(true, ordering: .relaxed)
                        metrics.recordConsumed(messages.count)
                        let consumedAt = clock.now
                        for message in messages {
                            tracker.withLock { $0.start(message.topicPartition, offset: message.offset) }
                            group.addTask {
                                if await self.process(message, consumedAt: consumedAt) {
                                    self.tracker.withLock { $0.finish(message.topicPartition, offset: message.offset) }
                                }
                                completionSignal.yield()
                            }
                        }
                    } else {
                        _ = await completionWaiter.next()
                    }
                    if lastCommit.duration(to: clock.now) >= configuration.commitInterval {
                        await commitFinished()
                        lastCommit = clock.now
                    }
                }
            }
            await commitFinished()
            consuming.store(false, ordering: .relaxed)
        } onGracefulShutdown: {
            self.isStopping.store(true, ordering: .relaxed)
        }
    }

    private func commitFinished() async {
        let offsets = tracker.withLock { $0.committableOffsets() }
        guard !offsets.isEmpty else { return }
        do {
            try await source.commit(offsets)
            tracker.withLock { $0.markCommitted(offsets) }
            metrics.recordCommit()
        } catch {
            // Not fatal: the same offsets (or later ones) are committed on the next round.
            logger.warning("offset commit failed", metadata: ["error": "\(error)"])
        }
    }

    /// Handles one message; returns false when it was interrupted and must not be acknowledged.
    private func process(_ message: KafkaMessage, consumedAt: ContinuousClock.Instant) async -> Bool {
        do {
            if message.topic == configuration.topics.tokens {
                try await processTokenUpdate(message)
            } else {
                try await processNotification(message, consumedAt: consumedAt)
            }
            return true
        } catch {
            return false
        }
    }

    private func processTokenUpdate(_ message: KafkaMessage) async throws(CancellationError) {
        let update: TokenRegistryUpdate
        do {
            update = try TokenRegistryUpdate(json: message.value)
        } catch {
            return try await deadLetter(message, error)
        }
        let applied = try await withStoreRetry { try await self.store.apply(update) }
        logger.debug(
            "token update",
            metadata: [
                "push.token": "\(DeviceTokenText.redacted(update.token))",
                "push.action": "\(update.action.rawValue)",
                "push.applied": "\(applied)",
            ]
        )
    }

    private func processNotification(
        _ message: KafkaMessage,
        consumedAt: ContinuousClock.Instant
    ) async throws(CancellationError) {
        let event: NotificationEvent
        do {
            event = try NotificationEvent(json: message.value)
        } catch {
            return try await deadLetter(message, error)
        }
        let tokensByUser = try await withStoreRetry {
            try await self.store.activeTokens(topic: event.topic, userIDs: event.userIDs, environment: event.environment)
        }
        let finished = await withTaskGroup(of: Bool.self) { group in
            for userID in event.userIDs {
                let devices = tokensByUser[userID] ?? []
                if devices.isEmpty {
                    group.addTask {
                        let result = self.noDevicesResult(event: event, userID: userID, consumedAt: consumedAt)
                        return (try? await self.publish(result)) != nil
                    }
                }
                for device in devices {
                    group.addTask {
                        (try? await self.deliver(event, to: device, consumedAt: consumedAt)) != nil
                    }
                }
            }
            return await group.allSatisfy { $0 }
        }
        if !finished { throw CancellationError() }
    }

    /// Sends to one device, records a 410, and publishes the result.
    private func deliver(
        _ event: NotificationEvent,
        to device: DeviceToken,
        consumedAt: ContinuousClock.Instant
    ) async throws(CancellationError) {
        let apnsID = NotificationID.derive(eventID: event.id, token: device.token)
        let request = APNSRequest(
            deviceToken: device.token,
            topic: event.pushType.apnsTopic(bundleID: event.topic),
            pushType: event.pushType,
            priority: event.priority,
            apnsID: apnsID,
            expiration: event.expiration,
            collapseID: event.collapseID,
            payload: event.payload
        )
        let outcome = try await sender.deliver(request, environment: device.environment, consumedAt: consumedAt)
        if outcome.status == .unregistered, let millis = outcome.unregisteredAtMilliseconds {
            let at = Date(timeIntervalSince1970: Double(millis) / 1000)
            let marked = try await withStoreRetry {
                try await self.store.markUnregistered(topic: event.topic, token: device.token, at: at)
            }
            if marked {
                let unregistered = UnregisteredTokenEvent(
                    token: device.token,
                    topic: event.topic,
                    userID: device.userID,
                    environment: device.environment,
                    unregisteredAtMilliseconds: millis,
                    eventID: event.id
                )
                try await publishReliably(
                    KafkaOutgoingMessage(
                        topic: configuration.topics.unregistered,
                        key: Array(device.token.utf8),
                        value: unregistered.json()
                    )
                )
                metrics.recordUnregisteredPublished()
            }
        }
        let result = DeliveryResult(
            eventID: event.id,
            userID: device.userID,
            token: device.token,
            topic: event.topic,
            environment: device.environment,
            status: outcome.status,
            apnsStatus: outcome.apnsStatus,
            reason: outcome.reason,
            apnsID: apnsID,
            attempts: outcome.attempts,
            latencyMilliseconds: Self.milliseconds(consumedAt.duration(to: .now)),
            completedAtMilliseconds: Self.epochMilliseconds()
        )
        if outcome.status != .delivered {
            logger.info(
                "notification not delivered",
                metadata: [
                    "push.event_id": "\(event.id)",
                    "push.token": "\(DeviceTokenText.redacted(device.token))",
                    "push.status": "\(outcome.status.rawValue)",
                    "apns.reason": "\(outcome.reason ?? "none")",
                ]
            )
        }
        try await publish(result)
    }

    private func noDevicesResult(
        event: NotificationEvent,
        userID: String,
        consumedAt: ContinuousClock.Instant
    ) -> DeliveryResult {
        DeliveryResult(
            eventID: event.id,
            userID: userID,
            token: nil,
            topic: event.topic,
            environment: nil,
            status: .noDevices,
            apnsStatus: nil,
            reason: nil,
            apnsID: nil,
            attempts: 0,
            latencyMilliseconds: Self.milliseconds(consumedAt.duration(to: .now)),
            completedAtMilliseconds: Self.epochMilliseconds()
        )
    }

    private func publish(_ result: DeliveryResult) async throws(CancellationError) {
        try await publishReliably(
            KafkaOutgoingMessage(topic: configuration.topics.results, key: Array(result.eventID.utf8), value: result.json())
        )
        metrics.recordResult(result.status)
    }

    /// Sends the original record to push.dlq with the reason headers of the contract.
    private func deadLetter(_ message: KafkaMessage, _ rejection: InputRejection) async throws(CancellationError) {
        logger.warning(
            "dead-lettering message",
            metadata: [
                "kafka.topic": "\(message.topic)",
                "kafka.partition": "\(message.partition)",
                "kafka.offset": "\(message.offset)",
                "herald.error": "\(rejection.code.rawValue)",
            ]
        )
        let headers =
            message.headers + [
                KafkaHeader(key: "herald-error", text: rejection.code.rawValue),
                KafkaHeader(key: "herald-error-detail", text: rejection.detail),
                KafkaHeader(key: "herald-source-topic", text: message.topic),
                KafkaHeader(key: "herald-source-partition", text: String(message.partition)),
                KafkaHeader(key: "herald-source-offset", text: String(message.offset)),
            ]
        try await publishReliably(
            KafkaOutgoingMessage(
                topic: configuration.topics.deadLetters,
                key: message.key,
                value: message.value,
                headers: headers
            )
        )
        metrics.recordDeadLetter()
    }

    /// Publishes, retrying with backoff until the broker acknowledges or the task is cancelled:
    /// a result is never dropped.
    private func publishReliably(_ message: KafkaOutgoingMessage) async throws(CancellationError) {
        try await retryingForever(what: "publish to \(message.topic)") {
            try await self.publisher.send(message)
        }
    }

    /// Runs a registry operation, retrying with backoff while PostgreSQL is unavailable.
    private func withStoreRetry<Result: Sendable>(
        _ operation: @escaping @Sendable () async throws -> Result
    ) async throws(CancellationError) -> Result {
        try await retryingForever(what: "token store", operation)
    }

    private func retryingForever<Result: Sendable>(
        what: String,
        _ operation: @escaping @Sendable () async throws -> Result
    ) async throws(CancellationError) -> Result {
        let policy = RetryPolicy(initialBackoff: .milliseconds(50), maximumBackoff: .seconds(5))
        var generator = SystemRandomNumberGenerator()
        var attempt = 0
        while true {
            if Task.isCancelled { throw CancellationError() }
            do {
                return try await operation()
            } catch {
                attempt += 1
                logger.warning("retrying \(what)", metadata: ["error": "\(error)", "attempt": "\(attempt)"])
                do {
                    try await Task.sleep(for: policy.backoff(afterAttempt: attempt, using: &generator))
                } catch {
                    throw CancellationError()
                }
            }
        }
    }

    private static func milliseconds(_ duration: Duration) -> Int64 {
        duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000
    }

    private static func epochMilliseconds() -> Int64 {
        Int64(Date().timeIntervalSince1970 * 1000)
    }
}

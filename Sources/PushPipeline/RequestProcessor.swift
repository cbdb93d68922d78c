import APNSCore
import DeviceTokenStore
import KafkaMessages
import Logging
import ServiceContextModule
import Synchronization
import Tracing

/// Turns poll batches of push.requests messages into results: validates the events (dead
/// letters for bad ones), resolves their users' devices and recorded outcomes, claims each
/// (event, device) so no copy pushes twice, sends through the ``NotificationSender``, hands
/// outcomes to the ledger writer and publishes what stands; finishes each message in the
/// offset tracker once its last result is published.
final class RequestProcessor: Sendable {
    private let configuration: PipelineConfiguration
    private let publisher: ReliablePublisher
    private let store: any DeviceTokenStore
    let ledger: any DeliveryLedger
    let storeOperations: StoreOperations
    private let deadLetters: DeadLetters
    private let sender: NotificationSender
    /// (event, token) deliveries this process is sending or recorded lately, so a duplicate
    /// event never pushes twice.
    let inFlight = DeliveryClaims(recentCapacity: 100_000)
    /// Bounds APNs requests in flight across all events, each until its outcome is recorded.
    let sendLimit: SendPermits
    /// Records outcomes in batches (group commit), run by ``recordOutcomes()``.
    private let ledgerWriter: LedgerWriter<DeliveryTicket>
    /// Traces events and sends when set (HERALD_OTEL_TRACES); nil costs nothing.
    private let tracer: (any Tracer)?
    private let metrics: PipelineMetrics
    private let logger: Logger

    /// Send permits held now (requests in flight until their outcome is recorded).
    var sendsInFlight: Int { sendLimit.inUse }

    /// Outcomes APNs answered that the ledger has not recorded yet.
    var unrecordedOutcomes: Int { ledgerWriter.unrecordedCount }

    /// Writes the outcomes sends hand over, a batch at a time, and publishes each written batch
    /// (``publishRecorded(_:)``); runs until cancelled.
    func recordOutcomes() async {
        await ledgerWriter.run { batch throws(CancellationError) in
            let started = ContinuousClock.now
            defer { self.metrics.recordStage(.ledgerWrite, since: started) }
            return try await self.storeOperations.run { try await self.ledger.record(batch) }
        } then: { recorded in
            await self.publishRecorded(recorded)
        }
    }

    init(
        configuration: PipelineConfiguration,
        publisher: ReliablePublisher,
        store: any DeviceTokenStore,
        ledger: any DeliveryLedger,
        storeOperations: StoreOperations,
        deadLetters: DeadLetters,
        sender: NotificationSender,
        tracer: (any Tracer)?,
        metrics: PipelineMetrics,
        logger: Logger
    ) {
        self.configuration = configuration
        self.publisher = publisher
        self.store = store
        self.ledger = ledger
        self.storeOperations = storeOperations
        self.deadLetters = deadLetters
        self.sender = sender
        // Bulk sends may hold three quarters of the permits: the rest stay free for urgent ones
        // (BulkLaneTests, herald-bench --campaign-urgent-rate).
        self.sendLimit = SendPermits(limit: configuration.maxConcurrentSends, bulkShare: 0.75)
        self.ledgerWriter = LedgerWriter<DeliveryTicket>(maxBatchSize: configuration.maxOutcomesPerLedgerWrite)
        self.tracer = tracer
        self.metrics = metrics
        self.logger = logger
    }

    /// Validates a poll batch of events, resolves all their users' tokens and recorded outcomes
    /// with one query per app and one ledger query, then delivers every result of the batch;
    /// returns once each message is finished (or when cancelled).
    ///
    /// Work is per batch where it can be: one claim pass, one publish of the results known
    /// without sending, and a task per device only for its APNs request, which hands the outcome
    /// to the ledger writer without waiting; the writer's batch is published as a whole
    /// (``publishRecorded(_:)``), and the batch's task wakes once, at the end.
    func process(_ messages: [KafkaMessage], from lane: InputLane, consumedAt: ContinuousClock.Instant) async {
        await withDiscardingTaskGroup { group in
            var events: [(KafkaMessage, NotificationEvent)] = []
            for message in messages {
                do throws(InputRejection) {
                    var event = try NotificationEvent(json: message.value)
                    if configuration.derivesCollapseID, event.collapseID == nil {
                        // Once per event, not per device: every device and every copy gets the same.
                        event.collapseID = NotificationID.collapseID(eventID: event.id)
                    }
                    events.append((message, event))
                } catch {
                    group.addTask {
                        if (try? await self.deadLetters.send(message, error)) != nil { lane.tracker.finish(message) }
                    }
                }
            }
            guard !events.isEmpty else { return }
            let traces = tracer.map { tracer in
                events.map { EventTrace(tracer: tracer, message: $0.0, eventID: $0.1.id, users: $0.1.userIDs.count) }
            }
            guard let resolved = try? await resolve(events) else { return }
            let plans = events.map { plan($0.1, of: $0.0, resolved: resolved, consumedAt: consumedAt) }
            let progress = BatchProgress(
                messages: events.map(\.0),
                results: plans.map(\.results),
                lane: lane,
                consumedAt: consumedAt,
                traces: traces
            )

            // Claims first, in one pass, so the results known without sending go out at once.
            var ready: [(messages: [KafkaOutgoingMessage], ticket: DeliveryTicket)] = []
            var sends: [(event: NotificationEvent, device: DeviceToken, ticket: DeliveryTicket)] = []
            var busy: [(event: NotificationEvent, device: DeviceToken, ticket: DeliveryTicket)] = []
            var recordedLately: [(event: NotificationEvent, device: DeviceToken, ticket: DeliveryTicket)] = []
            inFlight.deliveries.withLock { inFlight in
                for (index, plan) in plans.enumerated() {
                    let event = events[index].1
                    let headers = progress.resultHeaders(index)
                    for result in plan.noDevices {
                        ready.append(
                            ([resultMessage(result.json(), eventID: event.id, headers: headers)], DeliveryTicket(progress, index, event, status: .noDevices)))
                    }
                    for outcome in plan.recorded {
                        ready.append((republishing(outcome, of: event, headers: headers), DeliveryTicket(progress, index, event, status: nil)))
                    }
                    for device in plan.devices {
                        let key = DeliveryClaims.Deliveries.key(eventID: event.id, token: device.token)
                        let ticket = DeliveryTicket(progress, index, event, claim: key)
                        switch inFlight.claim(key) {
                        case .claimed: sends.append((event, device, ticket))
                        case .recordedLately: recordedLately.append((event, device, ticket))
                        case .busy: busy.append((event, device, ticket))
                        }
                    }
                }
            }
            if !ready.isEmpty {
                group.addTask { await self.publish(ready) }
            }
            if !recordedLately.isEmpty {
                group.addTask { await self.deliverRecordedLately(recordedLately, consumedAt: consumedAt) }
            }
            for (event, device, ticket) in busy {
                group.addTask { await self.deliverWhenUnclaimed(event, to: device, ticket: ticket, consumedAt: consumedAt) }
            }
            for (event, device, ticket) in sends {
                do { try await admitSend(from: lane) } catch { return }
                group.addTask { await self.send(event, to: device, ticket: ticket, consumedAt: consumedAt) }
            }
            await progress.waitUntilFinished()
        }
    }

    /// Waits for the lane's pace (the bulk lane's HERALD_BULK_MAX_RATE), then for a send permit
    /// in the lane's queue; throws when cancelled. The permit is given back once the result is
    /// published (or the send is fenced).
    func admitSend(from lane: InputLane) async throws {
        try await lane.pacer?.waitForSlot()
        try await sendLimit.acquire(lane.priority)
    }

    private struct ResolvedBatch: Sendable {
        /// Active devices by app, then user.
        var tokens: [String: [String: [DeviceToken]]] = [:]
        /// Recorded outcomes by event, then token.
        var recorded: [LedgerEvent: [String: RecordedDelivery]] = [:]
    }

    /// Looks up the batch's devices and its recorded outcomes; the two queries run at once
    /// (each on its own connection), so the batch waits for the slower one, not for both.
    private func resolve(_ messages: [(KafkaMessage, NotificationEvent)]) async throws(CancellationError) -> ResolvedBatch {
        let ledgerEvents = Array(Set(messages.map { ledgerEvent($0.1, of: $0.0) }))
        let oldestKept = LedgerEvent.day(ofMilliseconds: WallClock.millisecondsSince1970() - configuration.ledgerRetentionMilliseconds)
        metrics.recordLedgerLookupsBeyondRetention(ledgerEvents.count { $0.day < oldestKept })
        async let recordedLookup = try? storeOperations.run {
            let started = ContinuousClock.now
            defer { self.metrics.recordStage(.ledgerLookup, since: started) }
            return try await self.ledger.recordedDeliveries(of: ledgerEvents)
        }
        let events = messages.map(\.1)
        var batch = ResolvedBatch()
        let started = ContinuousClock.now
        for (topic, topicEvents) in Dictionary(grouping: events, by: \.topic) {
            let users = Array(Set(topicEvents.flatMap(\.userIDs)))
            guard !users.isEmpty else { continue }  // only events to broadcast channels
            batch.tokens[topic] = try await storeOperations.run {
                try await self.store.activeTokens(topic: topic, userIDs: users, environment: nil)
            }
        }
        metrics.recordStage(.tokenLookup, since: started)
        guard let recorded = await recordedLookup else { throw CancellationError() }
        batch.recorded = recorded
        return batch
    }

    /// The results of one event: per user, its recorded outcomes (republished whatever the
    /// registry says now: a 410 may have unregistered the device since), its unrecorded devices
    /// (sent to), or a `no_devices` result when it has neither. So every user has at least one
    /// result, and every event (validated to name 1 to 1,000 users) at least one: each message
    /// of a batch is finished by its last published result.
    private struct EventPlan {
        var noDevices: [DeliveryResult] = []
        var recorded: [RecordedDelivery] = []
        var devices: [DeviceToken] = []

        var results: Int { noDevices.count + recorded.count + devices.count }
    }

    private func plan(
        _ event: NotificationEvent,
        of message: KafkaMessage,
        resolved: ResolvedBatch,
        consumedAt: ContinuousClock.Instant
    ) -> EventPlan {
        let tokens = resolved.tokens[event.topic] ?? [:]
        let recorded = resolved.recorded[ledgerEvent(event, of: message)] ?? [:]
        var plan = EventPlan()
        if let channelID = event.channelID {
            // One result per event: the channel stands where a device would, in the ledger too.
            let key = Self.ledgerKey(channelID: channelID)
            if let outcome = recorded[key] {
                plan.recorded.append(outcome)
            } else {
                plan.devices.append(DeviceToken(userID: "", token: key, environment: event.environment ?? .production))
            }
            return plan
        }
        for userID in event.userIDs {
            let outcomes = recorded.values.filter { $0.userID == userID }
            let devices = (tokens[userID] ?? []).filter {
                (event.environment == nil || $0.environment == event.environment) && recorded[$0.token] == nil
            }
            if devices.isEmpty && outcomes.isEmpty {
                plan.noDevices.append(noDevicesResult(event: event, userID: userID, consumedAt: consumedAt))
            }
            plan.recorded += outcomes
            plan.devices += devices
        }
        return plan
    }

    /// What travels with one result until it is published: the message and event it belongs
    /// to, the (event, token) claim and send permit a sent one holds, and the status to count.
    struct DeliveryTicket: Sendable {
        var progress: BatchProgress
        var message: Int
        var event: NotificationEvent
        /// The claim key of a sent result (it also holds a send permit).
        var claim: Int?
        /// The status of a new result, counted once published (nil: a republished one).
        var status: DeliveryResult.Status?

        init(_ progress: BatchProgress, _ message: Int, _ event: NotificationEvent, claim: Int? = nil, status: DeliveryResult.Status? = nil) {
            self.progress = progress
            self.message = message
            self.event = event
            self.claim = claim
            self.status = status
        }
    }

    /// Sends to one device (its claim and a send permit held) and hands the outcome, and a
    /// 410's registry mark, to the ledger writer; ``publishRecorded(_:)`` publishes what stands.
    func send(
        _ event: NotificationEvent,
        to device: DeviceToken,
        ticket: DeliveryTicket,
        consumedAt: ContinuousClock.Instant
    ) async {
        let apnsID = NotificationID.derive(eventID: event.id, token: device.token)
        let request =
            if let channelID = event.channelID {
                APNSRequest(
                    channelID: channelID,
                    bundleID: event.topic,
                    priority: event.priority,
                    requestID: apnsID,
                    expiration: event.expiration ?? 0,
                    payload: event.payload
                )
            } else {
                APNSRequest(
                    deviceToken: device.token,
                    topic: event.pushType.apnsTopic(bundleID: event.topic),
                    pushType: event.pushType,
                    priority: event.priority,
                    apnsID: apnsID,
                    expiration: event.expiration,
                    collapseID: event.collapseID,
                    payload: event.payload
                )
            }
        let trace = tracer.flatMap { tracer in ticket.progress.trace(ticket.message).map { $0.startSend(tracer: tracer) } }
        defer { trace?.end() }
        let message = ticket.progress.message(ticket.message)
        let outcome: DeliveryOutcome
        do {
            outcome = try await sender.deliver(request, environment: device.environment, consumedAt: consumedAt) {
                ticket.progress.lane.tracker.isRevoked(message)
            }
        } catch {
            // Cancelled: the message stays unfinished and is redelivered. Fenced: the new owner has it.
            if error == .fenced { abandonFenced(ticket) }
            return
        }
        if let trace {
            trace.attributes["herald.event_id"] = event.id
            trace.attributes["herald.token"] = DeviceTokenText.redacted(device.token)
            trace.attributes["herald.status"] = outcome.status.rawValue
            trace.attributes["herald.attempts"] = outcome.attempts
            if let status = outcome.apnsStatus { trace.attributes["apns.status"] = status }
            if let reason = outcome.reason { trace.attributes["apns.reason"] = reason }
            if outcome.status != .delivered { trace.setStatus(SpanStatus(code: .error, message: outcome.reason)) }
        }
        if outcome.status != .delivered {
            // The event (and, when traced, the span) in context: the metadata providers name them.
            var context = trace?.context ?? ServiceContext.topLevel
            context.heraldEventID = event.id
            ServiceContext.withValue(context) {
                logger.info(
                    "notification not delivered",
                    metadata: [
                        PipelineLoggingKeys.token: "\(DeviceTokenText.redacted(device.token))",
                        PipelineLoggingKeys.status: "\(outcome.status.rawValue)",
                        PipelineLoggingKeys.apnsReason: "\(outcome.reason ?? "none")",
                    ]
                )
            }
        }
        var mark: UnregisterMark?
        if event.channelID == nil, outcome.status == .unregistered, let millis = outcome.unregisteredAtMilliseconds {
            mark = UnregisterMark(topic: event.topic, token: device.token, at: Timestamp(millisecondsSince1970: millis))
        }
        // The first publication is built from what the ledger keeps, as every republication is.
        let delivery = RecordedDelivery(
            event: ledgerEvent(event, of: message),
            token: device.token,
            userID: device.userID,
            outcome: .send(
                RecordedDelivery.SendOutcome(
                    status: outcome.status,
                    environment: device.environment,
                    apnsStatus: outcome.apnsStatus,
                    reason: outcome.reason,
                    attempts: outcome.attempts,
                    latencyMilliseconds: Self.milliseconds(consumedAt.duration(to: .now)),
                    completedAtMilliseconds: Self.epochMilliseconds(),
                    apnsUniqueID: outcome.apnsUniqueID,
                    unregisteredAtMilliseconds: mark.map { _ in outcome.unregisteredAtMilliseconds } ?? nil
                )
            )
        )
        var ticket = ticket
        ticket.status = outcome.status
        ledgerWriter.submit(delivery, marking: mark, ticket: ticket, urgent: ticket.progress.lane.priority == .urgent)
    }

    /// Gives up a send whose partition was revoked before its next attempt: the member that owns
    /// the partition now reads the message again and delivers it, so starting another attempt
    /// here would push twice. Its claim ends without an outcome (a copy here may send it if the
    /// partition comes back), its permit is returned, and its batch stops waiting for the message.
    private func abandonFenced(_ ticket: DeliveryTicket) {
        if let claim = ticket.claim { inFlight.release(claim) }
        sendLimit.release(1, from: ticket.progress.lane.priority)
        metrics.recordFencedSend()
        if ticket.progress.abandon(ticket.message) {
            ticket.progress.trace(ticket.message)?.span.end()
        }
    }

    /// The ledger's `token` for an event to a broadcast channel (device tokens are hex, so the two never meet).
    static func ledgerKey(channelID: String) -> String {
        "channel:" + channelID
    }

    /// Publishes a batch the ledger writer recorded: settles the claims, publishes the outcomes
    /// that stand together, then gives the permits back and finishes the messages.
    private func publishRecorded(_ batch: [(standing: RecordedDelivery, ticket: DeliveryTicket)]) async {
        inFlight.settle(batch.compactMap(\.ticket.claim))
        await publish(
            batch.map { (republishing($0.standing, of: $0.ticket.event, headers: $0.ticket.progress.resultHeaders($0.ticket.message)), $0.ticket) }
        )
    }

    /// Publishes results (each with its unregistered event, if any) together; then counts them,
    /// gives back the permits of sent ones and finishes the messages whose last result this was.
    func publish(_ results: [(messages: [KafkaOutgoingMessage], ticket: DeliveryTicket)]) async {
        let started = ContinuousClock.now
        do {
            try await publisher.publish(results.flatMap(\.messages))
        } catch {
            return  // Cancelled: the messages stay unfinished and are redelivered.
        }
        let published = ContinuousClock.now
        metrics.recordStage(.resultPublish, since: started)
        var permits: [SendPermits.Lane: Int] = [:]
        for (messages, ticket) in results {
            if ticket.claim != nil { permits[ticket.progress.lane.priority, default: 0] += 1 }
            metrics.recordPublished(consumedAt: ticket.progress.consumedAt, now: published)
            if let status = ticket.status {
                metrics.recordResult(status, lane: ticket.progress.lane.priority)
                if messages.contains(where: { $0.topic == configuration.topics.unregistered }) {
                    metrics.recordUnregisteredPublished()
                }
            } else {
                metrics.recordRepublished()
            }
            if let message = ticket.progress.published(ticket.message) {
                ticket.progress.trace(ticket.message)?.span.end()
                ticket.progress.lane.tracker.finish(message)
            }
        }
        for (lane, count) in permits { sendLimit.release(count, from: lane) }
    }

    /// The records of a recorded outcome of `event`: its push.unregistered event, if it marked
    /// the token, then its push.results record; the same bytes each time they are built.
    /// `headers` carry the event's trace context (none when tracing is off).
    func republishing(_ outcome: RecordedDelivery, of event: NotificationEvent, headers: [KafkaHeader]) -> [KafkaOutgoingMessage] {
        let result: [UInt8]
        let unregistered: [UInt8]?
        switch outcome.outcome {
        case .message(let recordedResult, let recordedEvent):
            (result, unregistered) = (recordedResult, recordedEvent)
        case .send(let send):
            (result, unregistered) = (
                DeliveryResult(recorded: send, of: event, token: outcome.token, userID: outcome.userID).json(),
                send.unregisteredAtMilliseconds.map {
                    UnregisteredTokenEvent(
                        token: outcome.token,
                        topic: event.topic,
                        userID: outcome.userID,
                        environment: send.environment,
                        unregisteredAtMilliseconds: $0,
                        eventID: event.id
                    ).json()
                }
            )
        }
        var messages: [KafkaOutgoingMessage] = []
        if let unregistered {
            messages.append(
                KafkaOutgoingMessage(topic: configuration.topics.unregistered, key: Array(outcome.token.utf8), value: unregistered, headers: headers)
            )
        }
        messages.append(resultMessage(result, eventID: event.id, headers: headers))
        return messages
    }

    /// Where `event`'s outcomes are kept: its ID and the day of the record that carried it (the
    /// consumer's clock for a record without a timestamp, which only message format v0 lacks).
    func ledgerEvent(_ event: NotificationEvent, of message: KafkaMessage) -> LedgerEvent {
        LedgerEvent(
            eventID: event.id,
            topic: event.topic,
            recordTimestampMilliseconds: message.timestampMilliseconds ?? Self.epochMilliseconds()
        )
    }

    private func resultMessage(_ result: [UInt8], eventID: String, headers: [KafkaHeader]) -> KafkaOutgoingMessage {
        KafkaOutgoingMessage(topic: configuration.topics.results, key: Array(eventID.utf8), value: result, headers: headers)
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

    private static func milliseconds(_ duration: Duration) -> Int64 {
        duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000
    }

    private static func epochMilliseconds() -> Int64 {
        WallClock.millisecondsSince1970()
    }
}

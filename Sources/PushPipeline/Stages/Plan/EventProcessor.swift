import WebPushCore
import PushCore
import APNSCore
import PushStores
import KafkaMessages
import Logging
import Synchronization
import Tracing
import FCMCore

/// Turns poll batches of push.requests messages into results: validates the events (dead
/// letters for bad ones), resolves their users' devices and recorded outcomes, claims each
/// (event, ``Recipient``: a device, or the channel of a broadcast) so no copy pushes twice,
/// sends through the ``RetryingSender``, hands
/// outcomes to the ledger writer and publishes what stands; finishes each message in the
/// coordinator once its last result is published.
final class EventProcessor: Sendable {
    let configuration: PipelineConfiguration
    let publisher: ReliablePublisher
    let store: any DeviceTokenStore
    let ledger: any DeliveryLedger
    let storeOperations: StoreOperations
    let deadLetters: DeadLetters
    let sender: RetryingSender
    /// The claims, send permits and batch progress of every notification in flight.
    let coordinator: DeliveryCoordinator
    /// Traces events and sends when set (HERALD_OTEL_TRACES); nil costs nothing.
    let tracer: (any Tracer)?
    let metrics: PipelineMetrics
    let logger: Logger

    /// Send permits held now (requests in flight until their outcome is recorded).
    var sendPermitsHeld: Int { coordinator.permitsHeld }

    /// Outcomes APNs answered that the ledger has not recorded yet.
    var unrecordedOutcomes: Int { coordinator.unrecordedOutcomes }

    /// Writes the outcomes sends hand over, a batch at a time, and publishes each written batch
    /// (``publishRecorded(_:)``); runs until cancelled.
    func recordOutcomes() async {
        await coordinator.recordOutcomes { batch throws(CancellationError) in
            let started = PipelineClock.now
            defer { self.metrics.recordStage(.ledgerWrite, since: started) }
            return try await self.storeOperations.run { try await self.ledger.record(batch.map { ($0.delivery, $0.mark) }) }
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
        sender: RetryingSender,
        coordinator: DeliveryCoordinator,
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
        self.coordinator = coordinator
        self.tracer = tracer
        self.metrics = metrics
        self.logger = logger
    }

    /// Validates a poll batch of events, resolves all their users' tokens and recorded outcomes
    /// with one statement (one more per further app), then starts every result of the batch on
    /// its way; returns once each send has handed its outcome to the ledger writer (or when
    /// cancelled).
    ///
    /// Work is per batch where it can be: one claim pass, one publish of the results known
    /// without sending, and the sends started together, each handing its outcome to the ledger
    /// writer without waiting; the writer's batch is published as a whole
    /// (``publishRecorded(_:)``), and its publication finishes the messages in the state machine:
    /// no task waits for the batch to finish.
    func process(_ messages: [StartedMessage], from lane: InputLane, consumedAt: ContinuousClock.Instant) async {
        await withDiscardingTaskGroup { group in
            var events: [(StartedMessage, NotificationEvent)] = []
            for message in messages {
                do throws(InputRejection) {
                    var event = try NotificationEvent(json: message.message.value, nowMilliseconds: PipelineClock.wallMilliseconds)
                    if configuration.derivesCollapseID, event.collapseID == nil {
                        // Once per event, not per device: every device and every copy gets the same.
                        event.collapseID = NotificationID.collapseID(eventID: event.id)
                    }
                    events.append((message, event))
                } catch {
                    group.addTask {
                        if (try? await self.deadLetters.send(message.message, error)) != nil { self.coordinator.finish(message) }
                    }
                }
            }
            guard !events.isEmpty else { return }
            let traces = tracer.map { tracer in
                events.map { EventTrace(tracer: tracer, message: $0.0.message, eventID: $0.1.id, users: $0.1.userIDs.count) }
            }
            guard let resolved = try? await resolve(events) else { return }
            let plans = events.map { plan($0.1, of: $0.0, resolved: resolved, consumedAt: consumedAt) }
            // One step of the state machine opens the batch, claims every device and takes the
            // permits free for the sends, so the results known without sending go out at once.
            let sendKeys = plans.indices.flatMap { index in
                plans[index].destinations.map { (message: index, claim: DeliveryCoordinator.claimKey(eventID: events[index].1.id, target: $0.ledgerTarget)) }
            }
            let (batchID, steps) = coordinator.resolved(
                events.map(\.0), results: plans.map(\.results), sends: sendKeys, lane: lane.priority, paced: lane.pacer != nil)
            let batch = PollBatch(id: batchID, messages: events.map(\.0), lane: lane, consumedAt: consumedAt, traces: traces)

            var ready: [(messages: [KafkaOutgoingMessage], ticket: DeliveryTicket)] = []
            var free: [Delivery] = []
            var admitted: [Delivery] = []
            var busy: [Delivery] = []
            var recordedLately: [Delivery] = []
            var sendIndex = 0
            for (index, plan) in plans.enumerated() {
                let event = events[index].1
                let headers = batch.resultHeaders(index)
                for result in plan.noDevices {
                    ready.append(([resultMessage(result.json(), eventID: event.id, headers: headers)], DeliveryTicket(batch, index, event, status: .noDevices)))
                }
                for outcome in plan.recorded {
                    ready.append((resultRecords(outcome, of: event, headers: headers), DeliveryTicket(batch, index, event, status: nil)))
                }
                for destination in plan.destinations {
                    let delivery = Delivery(destination: destination, ticket: DeliveryTicket(batch, index, event, claim: sendKeys[sendIndex].claim))
                    switch steps[sendIndex] {
                    case .send: free.append(delivery)
                    case .admit: admitted.append(delivery)
                    case .republish: recordedLately.append(delivery)
                    case .waitForClaim: busy.append(delivery)
                    case .fenced(let messageGivenUp): endFenced(delivery.ticket, messageGivenUp: messageGivenUp)
                    }
                    sendIndex += 1
                }
            }
            if !ready.isEmpty {
                group.addTask { await self.publish(ready) }
            }
            if !recordedLately.isEmpty {
                group.addTask { await self.deliverRecordedLately(recordedLately, consumedAt: consumedAt) }
            }
            for delivery in busy {
                group.addTask { await self.deliverWhenUnclaimed(delivery, consumedAt: consumedAt) }
            }
            // An unpaced lane started every send the free permits covered (an idle Herald, the
            // whole batch). What must wait does so in one admission loop per partition: a
            // partition's drain gives up its unstarted sends at once, never behind another
            // partition's send that waits for a permit or its pace.
            let byPartition = Dictionary(grouping: admitted) { batch.message($0.ticket.message).message.topicPartition }.values
            // The usual batch's sends all start at once, in this task: no task of their own.
            if !free.isEmpty, byPartition.isEmpty { return await send(free, consumedAt: consumedAt) }
            if !free.isEmpty { group.addTask { await self.send(free, consumedAt: consumedAt) } }
            for partitionSends in byPartition.dropFirst() {
                group.addTask { await self.admitAndSend(partitionSends, lane: lane, consumedAt: consumedAt) }
            }
            if let first = byPartition.first { await admitAndSend(first, lane: lane, consumedAt: consumedAt) }
        }
    }

    /// Takes, without waiting, a permit for each send of `sends` from `next` on that one is free
    /// for (those whose message is fenced are given up) and moves `next` past them.
    private func startFree(_ sends: [Delivery], from next: inout Int, lane: InputLane) -> ArraySlice<Delivery> {
        while next < sends.endIndex, isFenced(sends[next].ticket) {
            abandonFenced(sends[next].ticket, holdingPermit: false)
            next += 1
        }
        let free = coordinator.tryAcquirePermits(lane.priority, upTo: sends.endIndex - next)
        defer { next += free }
        return sends[next..<next + free]
    }

    /// Starts `sends` in order, as many at once as there are permits free (an idle Herald starts
    /// them in one go, a busy one what its finished sends make room for); returns once each has
    /// handed its outcome on (or when cancelled).
    private func admitAndSend(_ sends: [Delivery], lane: InputLane, consumedAt: ContinuousClock.Instant) async {
        await withDiscardingTaskGroup { group in
            var next = sends.startIndex
            while next < sends.endIndex {
                let chunk: ArraySlice<Delivery>
                do { chunk = try await admitSends(sends, from: &next, lane: lane) } catch { return }
                if !chunk.isEmpty { group.addTask { await self.send(Array(chunk), consumedAt: consumedAt) } }
            }
        }
    }

    /// Admits one send: waits for the lane's pace (the bulk lane's HERALD_BULK_MAX_RATE), then
    /// for a send permit in the lane's queue. A send whose message is fenced (its partition
    /// revoked or being drained) is given up instead: before it takes a pacer slot, after the
    /// pace's wait, and as soon as it is fenced while it waits for a permit. Returns whether it
    /// may start; throws when cancelled. The coordinator takes the permit back once the result
    /// is published (or the send is fenced).
    func admitSend(_ ticket: DeliveryTicket) async throws -> Bool {
        guard !isFenced(ticket) else {
            abandonFenced(ticket, holdingPermit: false)
            return false
        }
        if let pace = ticket.batch.lane.pacer?.reserveSlot(), pace > .zero {
            // A fence (a revocation, a stop) ends the wait: the slot is not used.
            try await coordinator.wait(pace, unlessFenced: ticket.batch.id, message: ticket.message)
        }
        guard !isFenced(ticket) else {
            abandonFenced(ticket, holdingPermit: false)
            return false
        }
        try await coordinator.acquirePermit(ticket.batch.lane.priority, unlessFenced: (ticket.batch.id, ticket.message))
        // Fenced while it waited: the permit it was handed goes back unused.
        guard !isFenced(ticket) else {
            abandonFenced(ticket)
            return false
        }
        return true
    }

    /// Admits the next sends of `sends` from `next` on and moves `next` past them: those whose
    /// message is fenced are given up at once, without a pacer slot or a permit; a paced lane
    /// admits one send per slot of its pace, any other lane as many as permits are free (at
    /// least one, waiting for it). Throws when cancelled.
    private func admitSends(_ sends: [Delivery], from next: inout Int, lane: InputLane) async throws -> ArraySlice<Delivery> {
        if lane.pacer != nil {
            while next < sends.endIndex {
                defer { next += 1 }
                if try await admitSend(sends[next].ticket) { return sends[next...next] }
            }
            return []
        }
        let free = startFree(sends, from: &next, lane: lane)
        guard free.isEmpty, next < sends.endIndex else { return free }
        // None free: waits for one (handed one to give back if the send is fenced meanwhile),
        // then takes whatever else is free.
        let first = sends[next].ticket
        try await coordinator.acquirePermit(lane.priority, unlessFenced: (first.batch.id, first.message))
        let more = coordinator.tryAcquirePermits(lane.priority, upTo: sends.endIndex - next - 1)
        defer { next += 1 + more }
        return sends[next...(next + more)]
    }

    /// The apps an event's devices belong to: its bundle ID (APNs), its Android package (FCM)
    /// and its web app (web push).
    private struct Apps: Hashable, Sendable {
        var apnsTopic: String?
        var fcmPackage: String?
        var webPushApp: String?

        init(_ event: NotificationEvent) {
            apnsTopic = event.apnsTopic
            fcmPackage = event.fcm?.package
            webPushApp = event.webpush?.app
        }
    }

    /// What a poll batch's lookups found: its users' devices and its events' recorded outcomes.
    private struct PollLookups: Sendable {
        /// Active devices of both platforms by apps, then user.
        var tokens: [Apps: [String: [DeviceToken]]] = [:]
        /// Recorded outcomes by event, then target.
        var recorded: [LedgerEvent: [LedgerTarget: RecordedDelivery]] = [:]
    }

    /// Looks up the batch's devices and its recorded outcomes: the recorded outcomes with the
    /// first app's devices, in one round trip on PostgreSQL
    /// (``DeviceTokenStore/activeDevicesAndRecordedDeliveries(apnsTopic:fcmPackage:webPushApp:userIDs:events:ledger:)``),
    /// then each other app's devices.
    private func resolve(_ messages: [(StartedMessage, NotificationEvent)]) async throws(CancellationError) -> PollLookups {
        let ledgerEvents = Array(Set(messages.flatMap { $0.0.ledgerEvents(eventID: $0.1.id, topic: $0.1.topic) }))
        let oldestKept = LedgerEvent.day(ofMilliseconds: PipelineClock.wallMilliseconds - configuration.ledgerRetention.wholeMilliseconds)
        metrics.recordLedgerLookupsBeyondRetention(ledgerEvents.count { $0.day < oldestKept })
        // Events only to broadcast channels have no users to look up.
        var usersByApps = Dictionary(grouping: messages.map(\.1), by: Apps.init).compactMap { apps, events -> (Apps, [String])? in
            let users = Array(Set(events.flatMap(\.userIDs)))
            return users.isEmpty ? nil : (apps, users)
        }
        var lookups = PollLookups()
        let started = PipelineClock.now
        if let (apps, users) = usersByApps.popLast() {
            let found = try await storeOperations.run {
                try await self.store.activeDevicesAndRecordedDeliveries(
                    apnsTopic: apps.apnsTopic, fcmPackage: apps.fcmPackage, webPushApp: apps.webPushApp, userIDs: users, events: ledgerEvents,
                    ledger: self.ledger)
            }
            (lookups.tokens[apps], lookups.recorded) = (found.devices, found.recorded)
        } else {
            lookups.recorded = try await storeOperations.run { try await self.ledger.recordedDeliveries(of: ledgerEvents) }
        }
        metrics.recordStage(.ledgerLookup, since: started)
        // One query per other app (both platforms in one round trip), one after the other: at
        // once, on two shared cores, they took longer (BENCHMARKS.md, "Several apps in a batch").
        for (apps, users) in usersByApps {
            lookups.tokens[apps] = try await storeOperations.run {
                try await self.store.activeDevices(
                    apnsTopic: apps.apnsTopic, fcmPackage: apps.fcmPackage, webPushApp: apps.webPushApp, userIDs: users)
            }
        }
        metrics.recordStage(.tokenLookup, since: started)
        return lookups
    }

    /// The results of one event: per user, its recorded outcomes (republished whatever the
    /// registry says now: a 410 may have unregistered the device since), its unrecorded devices
    /// (sent to), or a `no_devices` result when it has neither; for an event to a channel, its
    /// recorded outcome or the channel. So every user has at least one
    /// result, and every event (validated to name 1 to 1,000 users) at least one: each message
    /// of a batch is finished by its last published result.
    private struct EventPlan {
        var noDevices: [DeviceResult] = []
        var recorded: [RecordedDelivery] = []
        var destinations: [Recipient] = []

        var results: Int { noDevices.count + recorded.count + destinations.count }
    }

    private func plan(
        _ event: NotificationEvent,
        of message: StartedMessage,
        resolved: PollLookups,
        consumedAt: ContinuousClock.Instant
    ) -> EventPlan {
        let tokens = resolved.tokens[Apps(event)] ?? [:]
        let recorded = message.recordedOutcomes(eventID: event.id, topic: event.topic, in: resolved.recorded)
        var plan = EventPlan()
        if let channelID = event.channelID {
            // One result per event.
            if let outcome = recorded[Recipient.ledgerTarget(channelID: channelID)] {
                plan.recorded.append(outcome)
            } else {
                plan.destinations.append(.channel(id: channelID, environment: event.environment ?? .production))
            }
            return plan
        }
        for userID in event.userIDs {
            let outcomes = recorded.values.filter { $0.userID == userID }
            // The event's environment picks devices: every FCM device and browser is
            // `production`, so a sandbox event (a QA push) reaches none.
            let devices = (tokens[userID] ?? []).filter {
                (event.environment == nil || $0.environment == event.environment) && recorded[Recipient.device($0).ledgerTarget] == nil
            }
            if devices.isEmpty && outcomes.isEmpty {
                plan.noDevices.append(noDevicesResult(event: event, userID: userID, consumedAt: consumedAt))
            }
            plan.recorded += outcomes
            plan.destinations += devices.map(Recipient.device)
        }
        return plan
    }
}

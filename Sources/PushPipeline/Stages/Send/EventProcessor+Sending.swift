import PushCore
import APNSCore
import PushStores
import FCMCore
import WebPushCore
import KafkaMessages
import Logging
import ServiceContextModule
import Tracing

/// Sending one notification to one destination (a device or a channel): the ticket that
/// travels with it, the APNs request with its trace and log line, and the hand-over of the
/// outcome to the ledger writer.
extension EventProcessor {
    /// What travels with one result until it is published: the message and event it belongs
    /// to, the (event, token) claim and send permit a sent one holds, and the status to count.
    struct DeliveryTicket: Sendable {
        var batch: PollBatch
        var message: Int
        var event: NotificationEvent
        /// The claim key of a sent result (it also holds a send permit).
        var claim: Int?
        /// The status of a new result, counted once published (nil: a republished one).
        var status: DeviceResult.Status?
        /// The service a new result's device was sent to (nil: no device, or not sent).
        var platform: DevicePlatform?

        init(_ batch: PollBatch, _ message: Int, _ event: NotificationEvent, claim: Int? = nil, status: DeviceResult.Status? = nil) {
            self.batch = batch
            self.message = message
            self.event = event
            self.claim = claim
            self.status = status
        }
    }

    /// One event (its ticket's) to one destination.
    struct Delivery: Sendable {
        var destination: Recipient
        var ticket: DeliveryTicket

        var event: NotificationEvent { ticket.event }

        /// The service it goes through (a channel's is APNs).
        var platform: DevicePlatform {
            if case .device(let device) = destination { device.platform } else { .apns }
        }

        /// The lanes' precedence for a stream: the bulk lane's requests wait behind every urgent one.
        var precedence: StreamPrecedence { ticket.batch.lane.priority == .bulk ? .bulk : .urgent }
    }

    /// Sends one delivery (its claim and a send permit held); see ``send(_:consumedAt:)``.
    func send(_ delivery: Delivery, consumedAt: ContinuousClock.Instant) async {
        await send([delivery], consumedAt: consumedAt)
    }

    /// Sends deliveries (each with its claim and a send permit held): each platform's in one
    /// batch of first attempts, the platforms at once; hands each outcome, and an unregistered
    /// token's registry mark, to the ledger writer as it arrives; ``publishRecorded(_:)``
    /// publishes what stands.
    func send(_ deliveries: [Delivery], consumedAt: ContinuousClock.Instant) async {
        // The usual chunk is one platform's: no split, no second array.
        let platform = deliveries.first?.platform ?? .apns
        guard deliveries.contains(where: { $0.platform != platform }) else {
            return await send(deliveries, to: platform, consumedAt: consumedAt)
        }
        await withDiscardingTaskGroup { group in
            for (platform, chunk) in Dictionary(grouping: deliveries, by: \.platform) {
                group.addTask { await self.send(chunk, to: platform, consumedAt: consumedAt) }
            }
        }
    }

    /// Sends deliveries of one platform.
    private func send(_ deliveries: [Delivery], to platform: DevicePlatform, consumedAt: ContinuousClock.Instant) async {
        switch platform {
        case .apns: await sendApple(deliveries, consumedAt: consumedAt)
        case .fcm: await sendAndroid(deliveries, consumedAt: consumedAt)
        case .webpush: await sendBrowsers(deliveries, consumedAt: consumedAt)
        }
    }

    /// Sends APNs deliveries in one batch of first attempts.
    private func sendApple(_ deliveries: [Delivery], consumedAt: ContinuousClock.Instant) async {
        let requests = deliveries.map { delivery in
            var request = Self.request(for: delivery)
            request.precedence = delivery.precedence
            return (request: request, environment: delivery.destination.environment)
        }
        let traces = deliveries.map(startSendTrace)
        await sender.deliverAll(requests, consumedAt: consumedAt) { index in
            self.fence(deliveries[index].ticket)
        } report: { index, result in
            self.report(result, of: deliveries[index], trace: traces[index], consumedAt: consumedAt)
        }
    }

    /// Sends FCM deliveries in one batch of first attempts (FCM has no batch endpoint: one
    /// request per device, started together).
    private func sendAndroid(_ deliveries: [Delivery], consumedAt: ContinuousClock.Instant) async {
        let sendable = deliveries.compactMap { delivery -> (delivery: Delivery, request: FCMRequest)? in
            guard case .device(let device) = delivery.destination, let part = delivery.event.fcm else { return nil }
            var request = part.request(to: device.fcmTarget == .fid ? .fid(device.token) : .token(device.token))
            request.precedence = delivery.precedence
            return (delivery, request)
        }
        let traces = sendable.map { startSendTrace($0.delivery) }
        await sender.deliverAll(sendable.map(\.request), consumedAt: consumedAt) { index in
            self.fence(sendable[index].delivery.ticket)
        } report: { index, result in
            self.report(result, of: sendable[index].delivery, trace: traces[index], consumedAt: consumedAt)
        }
    }

    /// Sends browser deliveries in one batch of first attempts. A subscription the registry
    /// holds without usable keys, or on a host HERALD_WEBPUSH_ALLOWED_HOSTS does not allow (an
    /// app API may write rows directly), is `rejected`, `invalid_token`, and never sent.
    private func sendBrowsers(_ deliveries: [Delivery], consumedAt: ContinuousClock.Instant) async {
        var browsers: [(delivery: Delivery, request: WebPushRequest)] = []
        for delivery in deliveries {
            guard case .device(let device) = delivery.destination, let part = delivery.event.webpush else { continue }
            guard let keys = device.webPush,
                let subscription = try? WebPushSubscription(
                    endpoint: device.token, p256dh: keys.p256dh, auth: keys.auth, allowing: configuration.webPushHosts)
            else {
                // No attempt: the outcome of an empty history.
                record(
                    WebPushAttempts().outcome(.rejected, reason: InputRejection.Code.invalidToken.rawValue), of: delivery, trace: nil,
                    consumedAt: consumedAt)
                continue
            }
            browsers.append((delivery, part.request(to: subscription, vapidPublicKey: keys.vapidPublicKey, precedence: delivery.precedence)))
        }
        let sendable = browsers
        let traces = sendable.map { startSendTrace($0.delivery) }
        await sender.deliverAll(sendable.map(\.request), consumedAt: consumedAt) { index in
            self.fence(sendable[index].delivery.ticket)
        } report: { index, result in
            self.report(result, of: sendable[index].delivery, trace: traces[index], consumedAt: consumedAt)
        }
    }

    /// The span of a delivery's send, when its message is traced.
    private func startSendTrace(_ delivery: Delivery) -> (any Span)? {
        tracer.flatMap { tracer in delivery.ticket.batch.trace(delivery.ticket.message).map { $0.startSend(tracer: tracer) } }
    }

    /// Records a delivery's outcome, or ends its trace when it stopped without one.
    private func report(
        _ result: Result<DeliveryOutcome, DeliveryStopped>,
        of delivery: Delivery,
        trace: (any Span)?,
        consumedAt: ContinuousClock.Instant
    ) {
        switch result {
        case .success(let outcome):
            record(outcome, of: delivery, trace: trace, consumedAt: consumedAt)
        case .failure(let stopped):
            trace?.end()
            // Cancelled: the message stays unfinished and is redelivered. Fenced: the new owner has it.
            if stopped == .fenced { abandonFenced(delivery.ticket) }
        }
    }

    /// The APNs request of a delivery; its apns-id derives from the event and the destination,
    /// so every copy of one result carries the same.
    private static func request(for delivery: Delivery) -> APNSRequest {
        let (event, destination) = (delivery.event, delivery.destination)
        let apnsID = NotificationID.derive(eventID: event.id, token: destination.ledgerToken)
        return switch destination {
        case .channel(let channelID, _):
            APNSRequest(
                channelID: channelID,
                bundleID: event.topic,
                priority: event.priority,
                requestID: apnsID,
                expiration: event.expiration ?? 0,
                payload: event.payload ?? []
            )
        case .device(let device):
            APNSRequest(
                deviceToken: device.token,
                topic: event.pushType.apnsTopic(bundleID: event.topic),
                pushType: event.pushType,
                priority: event.priority,
                apnsID: apnsID,
                expiration: event.expiration,
                collapseID: event.collapseID,
                // An event with Apple devices to send to has an APNs payload (NotificationEvent).
                payload: event.payload ?? []
            )
        }
    }

    /// Traces and logs one delivery's outcome and hands it to the ledger writer.
    private func record(_ outcome: DeliveryOutcome, of delivery: Delivery, trace: (any Span)?, consumedAt: ContinuousClock.Instant) {
        defer { trace?.end() }
        let (event, destination, ticket) = (delivery.event, delivery.destination, delivery.ticket)
        let message = ticket.batch.message(ticket.message)
        if let trace {
            trace.attributes["herald.event_id"] = event.id
            trace.attributes["herald.token"] = DeviceTokenText.redacted(destination.ledgerToken)
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
                        PipelineLoggingKeys.token: "\(DeviceTokenText.redacted(destination.ledgerToken))",
                        PipelineLoggingKeys.status: "\(outcome.status.rawValue)",
                        PipelineLoggingKeys.apnsReason: "\(outcome.reason ?? "none")",
                    ]
                )
            }
        }
        var mark: UnregisterMark?
        if case .device(let device) = destination, outcome.status == .unregistered, let millis = outcome.unregisteredAtMilliseconds {
            let app = event.app(of: device.platform)
            mark = UnregisterMark(topic: app, token: device.token, at: Timestamp(millisecondsSince1970: millis))
        }
        // The first publication is built from what the ledger keeps, as every republication is.
        let recorded = RecordedDelivery(
            event: ledgerEvent(event, of: message),
            target: destination.ledgerTarget,
            userID: destination.userID,
            outcome: .send(
                RecordedDelivery.SendOutcome(
                    status: outcome.status,
                    environment: destination.environment,
                    apnsStatus: outcome.apnsStatus,
                    reason: outcome.reason,
                    attempts: outcome.attempts,
                    latencyMilliseconds: consumedAt.duration(to: PipelineClock.now).wholeMilliseconds,
                    completedAtMilliseconds: Self.epochMilliseconds(),
                    apnsUniqueID: outcome.apnsUniqueID,
                    unregisteredAtMilliseconds: mark?.at.millisecondsSince1970,
                    platform: outcome.platform,
                    fcmStatus: outcome.fcmStatus,
                    fcmMessageID: outcome.fcmMessageID,
                    webPushStatus: outcome.webPushStatus,
                    webPushLocation: outcome.webPushLocation
                )
            )
        )
        var counted = ticket
        counted.status = outcome.status
        counted.platform = outcome.platform
        coordinator.answered(PendingOutcome(delivery: recorded, mark: mark, ticket: counted), urgent: ticket.batch.lane.priority == .urgent)
    }

    /// Gives up a send whose partition was revoked (or is being drained) before its next
    /// attempt: the member that owns the partition now reads the message again and delivers it,
    /// so starting another attempt here would push twice. Its claim ends without an outcome (a
    /// copy here may send it if the partition comes back), its permit, if it holds one, is
    /// returned, and once nothing else of its message is outstanding the message is given up.
    func abandonFenced(_ ticket: DeliveryTicket, holdingPermit: Bool = true) {
        let lane = ticket.batch.lane.priority
        let givenUp = coordinator.fenced(batch: ticket.batch.id, message: ticket.message, claim: ticket.claim, permit: holdingPermit ? lane : nil)
        endFenced(ticket, messageGivenUp: givenUp)
    }

    /// Counts a send given up on its fence, and ends its message's trace when the message was
    /// given up with it.
    func endFenced(_ ticket: DeliveryTicket, messageGivenUp: Bool) {
        metrics.recordFencedSend()
        if messageGivenUp { ticket.batch.trace(ticket.message)?.span.end() }
    }

    /// The fence of a ticket's send: closed once its message is fenced (``isFenced(_:)``); its
    /// waits end then. A send waiting to retry a refusal gives its permit back meanwhile and
    /// takes one again, behind the lane's waiters, before its next attempt.
    func fence(_ ticket: DeliveryTicket) -> SendFence {
        SendFence(isClosed: { self.isFenced(ticket) }) { duration, refused throws(CancellationError) in
            let lane = ticket.batch.lane.priority
            if refused { self.coordinator.releasePermit(lane) }
            try await self.coordinator.wait(duration, unlessFenced: ticket.batch.id, message: ticket.message)
            guard refused else { return }
            do { try await self.coordinator.acquirePermit(lane, unlessFenced: (ticket.batch.id, ticket.message)) } catch { throw CancellationError() }
        }
    }

    /// Whether the ticket's message may no longer start a push attempt here: its partition was
    /// revoked since it started, or is being drained (``OffsetTracker/isFenced(_:generation:)``).
    func isFenced(_ ticket: DeliveryTicket) -> Bool {
        coordinator.isFenced(batch: ticket.batch.id, message: ticket.message)
    }
}

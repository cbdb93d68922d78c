import DeviceTokenStore

/// Copies of an event (duplicates on push.requests, or a redelivery racing the first copy):
/// a device another copy is sending to waits for that claim to be settled, and one recorded
/// lately is republished from the ledger, so no copy pushes a device twice.
extension RequestProcessor {
    /// Another copy of the event is sending to this device: waits for it to record its
    /// outcome, then republishes that (or sends, if it never recorded one).
    func deliverWhenUnclaimed(
        _ event: NotificationEvent,
        to device: DeviceToken,
        ticket: DeliveryTicket,
        consumedAt: ContinuousClock.Instant
    ) async {
        guard let key = ticket.claim else { return }
        while true {
            switch coordinator.claim(key) {
            case .claimed:
                do { try await admitSend(from: ticket.batch.lane) } catch { return }
                return await send(event, to: device, ticket: ticket, consumedAt: consumedAt)
            case .recordedLately:
                return await deliverRecordedLately([(event, device, ticket)], consumedAt: consumedAt)
            case .busy:
                await coordinator.waitUntilSettled(key)
                if Task.isCancelled { return }
            }
        }
    }

    /// Deliveries this process recorded lately, found by a copy of their event whose ledger
    /// lookup ran before they were recorded: asks the ledger again and republishes what it
    /// recorded; one it has no outcome for (a hash collision) is claimed and sent.
    func deliverRecordedLately(
        _ deliveries: [(event: NotificationEvent, device: DeviceToken, ticket: DeliveryTicket)],
        consumedAt: ContinuousClock.Instant
    ) async {
        let events = Array(Set(deliveries.map { ledgerEvent($0.event, of: $0.ticket.batch.message($0.ticket.message)) }))
        guard let recorded = try? await storeOperations.run({ try await self.ledger.recordedDeliveries(of: events) }) else { return }
        await withDiscardingTaskGroup { group in
            for (event, device, ticket) in deliveries {
                if let outcome = recorded[ledgerEvent(event, of: ticket.batch.message(ticket.message))]?[device.token] {
                    let republished = republishing(outcome, of: event, headers: ticket.batch.resultHeaders(ticket.message))
                    group.addTask { await self.publish([(republished, DeliveryTicket(ticket.batch, ticket.message, event))]) }
                    continue
                }
                guard let key = ticket.claim else { continue }
                switch coordinator.claimSending(key) {
                case .claimed:
                    do { try await admitSend(from: ticket.batch.lane) } catch { return }
                    group.addTask { await self.send(event, to: device, ticket: ticket, consumedAt: consumedAt) }
                case .recordedLately, .busy:
                    group.addTask { await self.deliverWhenUnclaimed(event, to: device, ticket: ticket, consumedAt: consumedAt) }
                }
            }
        }
    }
}

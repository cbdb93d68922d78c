import PushStores

/// Copies of an event (duplicates on push.requests, or a redelivery racing the first copy):
/// a destination another copy is sending to waits for that claim to be settled, and one
/// recorded lately is republished from the ledger, so no copy pushes a device twice.
extension EventProcessor {
    /// Another copy of the event is sending to this destination: waits for it to record its
    /// outcome, then republishes that (or sends, if it never recorded one).
    func deliverWhenUnclaimed(_ delivery: Delivery, consumedAt: ContinuousClock.Instant) async {
        guard let key = delivery.ticket.claim else { return }
        while true {
            switch coordinator.claim(key) {
            case .claimed:
                let admitted: Bool
                do { admitted = try await admitSend(delivery.ticket) } catch { return }
                return admitted ? await send(delivery, consumedAt: consumedAt) : ()
            case .recordedLately:
                return await deliverRecordedLately([delivery], consumedAt: consumedAt)
            case .busy:
                await coordinator.waitUntilSettled(key)
                if Task.isCancelled { return }
            }
        }
    }

    /// Deliveries this process recorded lately, found by a copy of their event whose ledger
    /// lookup ran before they were recorded: asks the ledger again and republishes what it
    /// recorded; one it has no outcome for (a hash collision) is claimed and sent.
    func deliverRecordedLately(_ deliveries: [Delivery], consumedAt: ContinuousClock.Instant) async {
        func message(of delivery: Delivery) -> StartedMessage { delivery.ticket.batch.message(delivery.ticket.message) }
        let events = Array(Set(deliveries.flatMap { message(of: $0).ledgerEvents(eventID: $0.event.id, topic: $0.event.topic) }))
        guard let recorded = try? await storeOperations.run({ try await self.ledger.recordedDeliveries(of: events) }) else { return }
        await withDiscardingTaskGroup { group in
            for delivery in deliveries {
                let ticket = delivery.ticket
                let outcomes = message(of: delivery).recordedOutcomes(eventID: delivery.event.id, topic: delivery.event.topic, in: recorded)
                if let outcome = outcomes[delivery.destination.ledgerTarget] {
                    let republished = resultRecords(outcome, of: delivery.event, headers: ticket.batch.resultHeaders(ticket.message))
                    group.addTask { await self.publish([(republished, DeliveryTicket(ticket.batch, ticket.message, delivery.event))]) }
                    continue
                }
                guard let key = ticket.claim else { continue }
                switch coordinator.claimSending(key) {
                case .claimed:
                    let admitted: Bool
                    do { admitted = try await admitSend(ticket) } catch { return }
                    if admitted { group.addTask { await self.send(delivery, consumedAt: consumedAt) } }
                case .recordedLately, .busy:
                    group.addTask { await self.deliverWhenUnclaimed(delivery, consumedAt: consumedAt) }
                }
            }
        }
    }
}

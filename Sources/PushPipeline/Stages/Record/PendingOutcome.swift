import PushStores

/// An answered send's outcome on its way to the ledger: what to record, the registry mark of a
/// 410 (or FCM's UNREGISTERED), and the ticket its result is published with. The delivery
/// coordinator queues it (``DeliveryCoordinator/answered(_:urgent:)``) until the ledger writer
/// takes it into a write (``DeliveryCoordinator/recordOutcomes(writing:then:)``).
struct PendingOutcome: Sendable {
    var delivery: RecordedDelivery
    var mark: UnregisterMark?
    var ticket: EventProcessor.DeliveryTicket
}

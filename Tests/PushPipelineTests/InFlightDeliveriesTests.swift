@testable import PushPipeline
import Testing

struct InFlightDeliveriesTests {
    let first = InFlightDeliveries.key(eventID: "e1", token: "aa")
    let second = InFlightDeliveries.key(eventID: "e1", token: "bb")

    @Test func aClaimIsExclusiveUntilSettledAndThenPointsToTheLedger() {
        var deliveries = InFlightDeliveries(recentCapacity: 10)
        #expect(deliveries.claim(first) == .claimed)
        #expect(deliveries.claim(first) == .busy, "another copy is sending it")
        #expect(deliveries.claim(second) == .claimed, "another token is another delivery")
        deliveries.settle(first)
        #expect(deliveries.claim(first) == .recordedLately)
        #expect(deliveries.claimSending(first) == .claimed, "when the ledger has no outcome, it may be sent")
        #expect(deliveries.claimSending(first) == .busy)
    }

    @Test func onlyTheLastRecordedDeliveriesAreRemembered() {
        var deliveries = InFlightDeliveries(recentCapacity: 2)
        let keys = (0..<3).map { InFlightDeliveries.key(eventID: "e\($0)", token: "aa") }
        for key in keys {
            #expect(deliveries.claim(key) == .claimed)
            deliveries.settle(key)
        }
        #expect(deliveries.claim(keys[0]) == .claimed, "the oldest was forgotten")
        #expect(deliveries.claim(keys[1]) == .recordedLately)
        #expect(deliveries.claim(keys[2]) == .recordedLately)
    }

    @Test func theKeyTellsEventAndTokenApart() {
        #expect(InFlightDeliveries.key(eventID: "e1", token: "aa") == InFlightDeliveries.key(eventID: "e1", token: "aa"))
        #expect(InFlightDeliveries.key(eventID: "e1a", token: "a") != InFlightDeliveries.key(eventID: "e1", token: "aa"))
    }
}

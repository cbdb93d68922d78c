import KafkaMessages
@testable import PushPipeline
import Testing

@Suite(.timeLimit(.minutes(1)))
struct BatchProgressTests {
    static func message(_ offset: Int64) -> KafkaMessage {
        KafkaMessage(topic: "push.requests", partition: 0, offset: offset, key: [], value: [])
    }

    @Test func anAbandonedMessageIsNeverFinishedAndNoLongerHoldsTheBatch() async {
        let progress = BatchProgress(
            messages: [Self.message(1), Self.message(2)],
            results: [2, 1],
            lane: InputLane(priority: .urgent, source: FakeSource([])),
            consumedAt: .now,
            traces: nil
        )
        #expect(progress.published(0) == nil, "one of its two results")
        let abandoned = progress.abandon(0)
        #expect(abandoned)
        let abandonedTwice = progress.abandon(0)
        #expect(!abandonedTwice)
        #expect(progress.published(0) == nil, "a result published after the fence finishes nothing")
        #expect(progress.published(1)?.offset == 2)
        await progress.waitUntilFinished()  // returns: nothing left to wait for
    }
}

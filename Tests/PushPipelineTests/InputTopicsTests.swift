import PushPipeline
import Testing

/// The one table of input topics, with the names an operator configured.
@Suite struct InputTopicsTests {
    @Test func eachLaneSubscribesToItsTopicsAndEveryTopicSaysWhatItsRecordsAre() {
        var topics = PushTopics()
        topics.requests = "acme.push"
        topics.bulkRequests = "acme.push.campaigns"
        topics.tokens = "acme.tokens"
        topics.channels = "acme.channels"
        #expect(topics.subscriptions(bulk: false) == ["acme.push", "acme.tokens", "acme.channels"])
        #expect(topics.subscriptions(bulk: true) == ["acme.push.campaigns"])
        let inputs = Dictionary(uniqueKeysWithValues: topics.inputs.map { ($0.topic, $0.input) })
        #expect(
            inputs == [
                "acme.push": .notificationEvents, "acme.push.campaigns": .notificationEvents, "acme.tokens": .tokenUpdates, "acme.channels": .channelCommands,
            ])
        #expect(!Set(topics.inputs.map(\.topic)).contains(topics.results), "Herald never reads what it writes")
    }
}

import KafkaMessages
import Foundation
import KafkaTransport
import Logging
import Testing

/// How the producer reports what Tansu can never take, so the pipeline can tell a stall that
/// needs an operator from one that clears by itself.
@Suite(.timeLimit(.minutes(2)))
struct ProduceErrorTests {
    @Test func aRecordLargerThanMessageMaxBytesIsAPermanentTooLargeError() async throws {
        var configuration = try TestEnvironment.kafka
        configuration.properties["message.max.bytes"] = "2000"
        let producer = try KafkaProducer(configuration: configuration, logger: Logger(label: "test"))
        let topic = try TestTopics(partitions: 1).results
        try await producer.send(KafkaOutgoingMessage(topic: topic, key: nil, value: Array(repeating: 0x61, count: 500)))
        do {
            try await producer.send(KafkaOutgoingMessage(topic: topic, key: nil, value: Array(repeating: 0x61, count: 3000)))
            Issue.record("a 3000-byte record was accepted under message.max.bytes=2000")
        } catch let error as KafkaError {
            #expect(error.isRecordTooLarge)
            #expect(!error.isRetriable)
            #expect(error.cause == "MSG_SIZE_TOO_LARGE")
        }
    }
}

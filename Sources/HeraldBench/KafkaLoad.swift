import KafkaMessages
import APNSCore
import Foundation
import HeraldService
import KafkaTransport
import Logging
import PostgresNIO

/// Kafka loops of the pipeline benchmark.
enum KafkaLoad {
    /// Runs `body` while `producer` and `consumer` run (they flush and leave the group afterwards).
    static func withClients<Result: Sendable>(
        _ producer: KafkaProducer,
        _ consumer: KafkaConsumer,
        _ body: () async throws -> Result
    ) async throws -> Result {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await producer.run() }
            group.addTask { try await consumer.run() }
            defer { group.cancelAll() }
            return try await body()
        }
    }

    /// Polls until the consumer has its partitions (its topic is still empty); 60 s at most.
    static func waitUntilJoined(_ consumer: KafkaConsumer) async throws {
        let deadline = ContinuousClock.now + .seconds(60)
        while !consumer.hasJoinedGroup {
            guard ContinuousClock.now < deadline else { throw BenchFailure("the result reader did not join its group in 60 s") }
            _ = try await consumer.poll(maxMessages: 100, timeout: .milliseconds(100))
        }
    }

    /// Produces every message as fast as librdkafka takes them, or at `perSecond` messages a
    /// second (an open load, for latency below saturation), with at most `window` awaiting
    /// their delivery report; returns each message's produce time and the time of its delivery
    /// report (ms since 1970), and the seconds until the last report.
    static func produceAll(
        _ messages: [KafkaOutgoingMessage],
        producer: KafkaProducer,
        perSecond: Double? = nil,
        window: Int = 5_000
    ) async throws -> (times: [Int64], acknowledged: [Int64], seconds: Double) {
        let start = ContinuousClock.now
        return try await withThrowingTaskGroup(of: (Int, Int64).self) { group in
            var times = [Int64](repeating: 0, count: messages.count)
            var acknowledged = [Int64](repeating: 0, count: messages.count)
            for (index, message) in messages.enumerated() {
                if let perSecond {
                    while Double(index) >= (ContinuousClock.now - start).inSeconds * perSecond {
                        try await Task.sleep(for: .milliseconds(2))
                    }
                }
                if index >= window, let (done, at) = try await group.next() { acknowledged[done] = at }
                try Task.checkCancellation()
                times[index] = wallMilliseconds()
                group.addTask {
                    try await producer.send(message)
                    return (index, wallMilliseconds())
                }
            }
            for try await (done, at) in group { acknowledged[done] = at }
            return (times, acknowledged, (ContinuousClock.now - start).inSeconds)
        }
    }

    /// Polls `consumer`, handing every record to `handle`, until `done()` reaches `target`;
    /// calls `everySecond` once a second and throws after 60 s without progress.
    static func drain(
        _ consumer: KafkaConsumer,
        target: Int,
        done: () -> Int,
        handle: (KafkaMessage) -> Void,
        everySecond: () -> Void
    ) async throws {
        let clock = ContinuousClock()
        var lastDone = done()
        var lastProgress = clock.now
        var nextTick = clock.now + .seconds(1)
        while done() < target {
            for message in try await consumer.poll(maxMessages: 10_000, timeout: .milliseconds(100)) { handle(message) }
            let now = clock.now
            if done() > lastDone {
                lastDone = done()
                lastProgress = now
            } else if now - lastProgress > .seconds(60) {
                throw BenchFailure("FAILED: no progress for 60 s, \(lastDone) of \(target) read")
            }
            if now >= nextTick {
                everySecond()
                nextTick += .seconds(1)
            }
        }
    }

    /// The broker alone: `records` small records produced to a fresh topic and read back by a
    /// fresh group with the same clients; records/s from the first produce to the last read.
    static func brokerAlone(services: BenchServices, records: Int, partitions: Int, logger: Logger) async throws -> Double {
        let topic = "hb\(UUID().uuidString.prefix(8).lowercased()).bench.broker"
        try services.createTopics([topic], partitions: partitions)
        let producer = try KafkaProducer(configuration: services.kafka, logger: logger)
        let consumer = try KafkaConsumer(configuration: services.kafka, groupID: "\(topic).reader", topics: [topic], logger: logger)
        let padding = String(repeating: "x", count: 80)
        let messages = (0..<records).map { KafkaOutgoingMessage(topic: topic, key: Array("\($0)".utf8), value: Array("record \($0) \(padding)".utf8)) }
        defer { services.deleteTopics([topic]) }
        return try await withClients(producer, consumer) {
            try await waitUntilJoined(consumer)
            let start = ContinuousClock.now
            async let produced = produceAll(messages, producer: producer)
            var count = 0
            try await drain(consumer, target: records, done: { count }, handle: { _ in count += 1 }, everySecond: {})
            let seconds = (ContinuousClock.now - start).inSeconds
            _ = try await produced
            return Double(records) / seconds
        }
    }
}

extension KafkaLoad {
    /// The broker alone under an open load: records produced at `perSecond` for `seconds` to a
    /// fresh topic and read back by a fresh group, with the clients Herald's run uses; the
    /// latency from produce to read (ms) of the records produced after the warm-up.
    static func brokerAloneAtRate(
        services: BenchServices,
        perSecond: Int,
        seconds: Int,
        partitions: Int,
        logger: Logger
    ) async throws -> (read: Percentiles, acknowledged: Percentiles) {
        let topic = "hb\(UUID().uuidString.prefix(8).lowercased()).bench.broker-rate"
        try services.createTopics([topic], partitions: partitions)
        defer { services.deleteTopics([topic]) }
        let producer = try KafkaProducer(configuration: services.kafka, logger: logger)
        let consumer = try KafkaConsumer(configuration: services.kafka, groupID: "\(topic).reader", topics: [topic], logger: logger)
        let records = max(1, perSecond * seconds)
        let padding = String(repeating: "x", count: 80)
        let messages = (0..<records).map { KafkaOutgoingMessage(topic: topic, key: Array("\($0)".utf8), value: Array("\($0) \(padding)".utf8)) }
        return try await withClients(producer, consumer) {
            try await waitUntilJoined(consumer)
            async let produced = produceAll(messages, producer: producer, perSecond: Double(perSecond))
            var readAt = [Int64](repeating: -1, count: records)
            var count = 0
            try await drain(consumer, target: records, done: { count }) { message in
                guard let value = message.value, let index = Int(String(decoding: value.prefix { $0 != UInt8(ascii: " ") }, as: UTF8.self)),
                    index < records, readAt[index] < 0
                else { return }
                readAt[index] = wallMilliseconds()
                count += 1
            } everySecond: {
            }
            let (times, acknowledged, _) = try await produced
            let warmFrom = (times.first ?? 0) + Int64(PipelineRun.warmUp.components.seconds * 1000)
            func after(warmUp: [Int64]) -> Percentiles {
                Percentiles(zip(times, warmUp).filter { $0.0 >= warmFrom }.map { $1 - $0 })
            }
            return (after(warmUp: readAt), after(warmUp: acknowledged))
        }
    }
}

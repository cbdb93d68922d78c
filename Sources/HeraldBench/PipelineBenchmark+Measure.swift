import KafkaMessages
import APNSCore
import APNSHTTP2
import ArgumentParser
import Foundation
import HeraldService
import KafkaTransport
import Logging
import PushPipeline

extension PipelineBenchmark {
    /// Produces the events and reads the results while sampling Herald and its neighbours.
    func measure(
        _ workload: Workload,
        rate: Int,
        topics: [String],
        urgent: UrgentLoad?,
        heralds: [HeraldChild],
        mockPID: Int32,
        fcmMockPID: Int32?,
        webPushMockPID: Int32?,
        services: BenchServices,
        logger: Logger
    ) async throws -> PipelineRun {
        let producer = try KafkaProducer(configuration: services.kafka, logger: logger)
        let reader = try KafkaConsumer(configuration: services.kafka, groupID: "\(topics[2]).reader", topics: [topics[2]], logger: logger)
        // A campaign goes to the bulk topic, with the urgent alerts on push.requests.
        let messages = (0..<workload.eventCount).map {
            KafkaOutgoingMessage(topic: urgent == nil ? topics[0] : topics[7], key: Array(workload.eventID($0).utf8), value: workload.eventJSON($0))
        }
        let broker = services.brokerPIDs()
        let heraldPIDs = heralds.map(\.pid)
        func groups() -> [String: [Int32]] {
            let postgres = ProcStats.pids { comm, _ in comm == "postgres" }
            return [
                "herald": heraldPIDs, "postgres": postgres, "tansu": broker.tansu, "proxy": broker.proxy, "mock-apns": [mockPID],
                "mock-fcm": fcmMockPID.map { [$0] } ?? [], "mock-webpush": webPushMockPID.map { [$0] } ?? [],
            ]
        }
        let (eventKey, tokenKey, statusKey) = (Array(#""event_id":""#.utf8), Array(#""token":""#.utf8), Array(#""status":""#.utf8))
        let latencyKey = Array(#""latency_ms":"#.utf8)
        let total = workload.tokens.count
        /// Takes a push.results record of an urgent alert; false for any other.
        func urgentResult(_ message: KafkaMessage) -> Bool {
            guard let urgent, let value = message.value, let id = jsonString(eventKey, in: value) else { return false }
            return urgent.handle(
                eventID: id,
                resultAt: message.timestampMilliseconds ?? wallMilliseconds(),
                heraldMilliseconds: jsonInteger(latencyKey, in: value)
            )
        }
        return try await KafkaLoad.withClients(producer, reader) {
            try await KafkaLoad.waitUntilJoined(reader)
            var nextUrgent = 0
            if let urgent {
                // The idle figure first: 10 s of alerts alone, then 2 s for the last results.
                async let idleProduced = urgent.produce(with: producer, phase: .idle, from: 0, for: .seconds(10))
                let idleEnd = ContinuousClock.now + .seconds(12)
                while ContinuousClock.now < idleEnd {
                    for message in try await reader.poll(maxMessages: 10_000, timeout: .milliseconds(100)) { _ = urgentResult(message) }
                }
                nextUrgent = try await idleProduced
            }
            var seen = [Bool](repeating: false, count: total)
            var unique = 0
            let transactionsBefore = try await services.transactionCount(logger: logger)
            var run = PipelineRun(start: CPUSample.take(groups()))
            let clock = ContinuousClock()
            let startedAt = clock.now
            run.firstProduceMilliseconds = wallMilliseconds()
            // Events a second for the asked notification rate (events carry different numbers).
            let eventsPerSecond = rate > 0 ? Double(rate) * Double(messages.count) / Double(total) : nil
            async let produced = KafkaLoad.produceAll(messages, producer: producer, perSecond: eventsPerSecond)
            let firstCampaignAlert = nextUrgent
            let urgentDuringCampaign = urgent.map { urgent in
                Task { try await urgent.produce(with: producer, phase: .campaign, from: firstCampaignAlert, for: nil) }
            }

            /// Counts one push.results record against the workload.
            func handle(_ message: KafkaMessage) {
                if urgentResult(message) { return }
                guard let value = message.value, let id = jsonString(eventKey, in: value), let token = jsonString(tokenKey, in: value),
                    let event = workload.eventIndex(id), let index = workload.tokenIndex[token].map(Int.init),
                    workload.tokenEvents[index] == event
                else {
                    run.unexpected += 1
                    return
                }
                guard !seen[index] else {
                    run.duplicates += 1
                    return
                }
                seen[index] = true
                unique += 1
                let status = jsonString(statusKey, in: value) ?? "unreadable"
                if status != "delivered" { run.notDelivered[status, default: 0] += 1 }
                run.resultEvents.append(Int32(event))
                run.heraldLatencies.append(jsonInteger(latencyKey, in: value) ?? -1)
                if let timestamp = message.timestampMilliseconds {
                    run.resultTimes.append(timestamp)
                } else {
                    run.resultTimes.append(wallMilliseconds())
                    run.withoutTimestamp += 1
                }
            }
            var (lastUnique, lastTick) = (0, startedAt)
            try await KafkaLoad.drain(reader, target: total, done: { unique }, handle: handle) {
                if run.warm == nil, clock.now - startedAt >= PipelineRun.warmUp {
                    run.warm = (CPUSample.take(groups()), heralds.compactMap { httpGet(port: $0.port, path: "/metrics")?.body }, unique)
                }
                run.rssKilobytes.append(heraldPIDs.map { ProcStats.statusKilobytes($0, "VmRSS") }.reduce(0, +))
                let rate = Double(unique - lastUnique) / (clock.now - lastTick).inSeconds
                print("  \(unique)/\(total) notifications, \(fixed(rate))/s over the last second, \(fixed((clock.now - startedAt).inSeconds, 1)) s")
                (lastUnique, lastTick) = (unique, clock.now)
                fflush(nil)  // show progress at once through a pipe (tee) too
            }
            run.seconds = (clock.now - startedAt).inSeconds
            run.end = CPUSample.take(groups())
            // The statistics lag: read them after a second, outside the CPU window.
            try await Task.sleep(for: .seconds(1))
            run.postgresTransactions = try await services.transactionCount(logger: logger) - transactionsBefore
            run.peakKilobytes = heraldPIDs.map { ProcStats.statusKilobytes($0, "VmHWM") }.max() ?? 0
            (run.produceTimes, _, run.produceSeconds) = try await produced
            urgentDuringCampaign?.cancel()
            _ = try? await urgentDuringCampaign?.value
            // Two more seconds (outside the window) for late duplicates, longer until every urgent
            // alert has its results (at most 15 s).
            let graceEnd = clock.now + .seconds(2)
            let urgentEnd = clock.now + .seconds(15)
            while clock.now < graceEnd || (clock.now < urgentEnd && urgent?.progress.allAnswered == false) {
                for message in try await reader.poll(maxMessages: 10_000, timeout: .milliseconds(200)) { handle(message) }
            }
            run.rssAfterKilobytes = heraldPIDs.map { ProcStats.statusKilobytes($0, "VmRSS") }.reduce(0, +)
            run.heraldMetrics = heralds.compactMap { httpGet(port: $0.port, path: "/metrics")?.body }
            return run
        }
    }
}

import Foundation
import HeraldService
import KafkaTransport
import MockAPNS
import MockFCM
import Testing

/// `herald run` re-reads HERALD_CREDENTIALS_FILE while it pushes: a key replaced and
/// signalled with SIGHUP, a file that no longer parses (ignored, reported, Herald keeps running),
/// and a key put back without a signal (the periodic check) each take effect without a restart,
/// and every notification is sent exactly once.
@Suite(.timeLimit(.minutes(5)))
struct CredentialsReloadTests {
    @Test func aReplacedKeyTakesEffectWithoutARestartAndNothingIsLostOrSentTwice() async throws {
        // Slow answers keep requests in flight (and waiting for streams) while credentials change.
        let testbed = try HeraldTestbed(
            faults: MockAPNSFaults(latency: .init(fixed: .milliseconds(20))),
            otherKeyIDs: ["KEY7654321"]
        )
        let firstKey = testbed.key
        let secondKey = try #require(testbed.otherKeys.first)
        let file = testbed.directory.appendingPathComponent("credentials.json")
        func writeCredentials(_ key: TestProviderKey) throws {
            try Data(
                #"[{"topics": ["\#(testbed.bundleID)"], "key_path": "\#(key.path)", "key_id": "\#(key.keyID)", "team_id": "\#(key.teamID)"}]"#.utf8
            ).write(to: file, options: .atomic)
        }
        try writeCredentials(firstKey)
        let users = (0..<50).map { "u-\($0)" }
        let devices = users.map { TestDevice(user: $0, token: TestDevice.randomToken(), environment: "production") }
        let phases = ["before", "after-sighup", "after-broken-file", "after-file-check"]
        let eventsPerPhase = 8

        try await testbed.withMocks {
            var environment = try await testbed.heraldEnvironment(group: "herald-\(UUID().uuidString)")
            for key in ["HERALD_APNS_KEY_PATH", "HERALD_APNS_KEY_ID", "HERALD_APNS_TEAM_ID"] { environment[key] = nil }
            environment["HERALD_CREDENTIALS_FILE"] = file.path
            environment["HERALD_CREDENTIALS_CHECK_S"] = "1"
            let herald = try await testbed.startHerald(environment)
            try await testbed.register(devices)
            try await testbed.waitForActiveTokens(users: users, count: devices.count)
            let log = HeraldLog(path: herald.logPath)

            func publish(_ phase: String) async throws {
                for index in 0..<eventsPerPhase { try await testbed.publishEvent(id: "\(phase)-\(index)", users: users) }
            }
            try await publish(phases[0])
            // Replaced while the first phase is being pushed.
            try await Task.sleep(for: .milliseconds(300))
            try writeCredentials(secondKey)
            herald.send(SIGHUP)
            try await log.waitFor("credentials file applied", count: 1)
            try await publish(phases[1])

            try Data("not json".utf8).write(to: file, options: .atomic)
            herald.send(SIGHUP)
            try await log.waitFor("credentials file not applied", count: 1)
            #expect(herald.isRunning, "SIGHUP does not end Herald")
            try await publish(phases[2])

            // Back to the first key, with no signal: the periodic check applies it.
            try writeCredentials(firstKey)
            try await log.waitFor("credentials file applied", count: 2)
            try await publish(phases[3])

            let expected = phases.count * eventsPerPhase * devices.count
            let reader = try TopicReader(topics: [testbed.topics.results])
            let records = try await reader.read(timeout: .seconds(180)) { $0.count >= expected }
            let results = records.compactMap(ResultRecord.init)
            #expect(results.count == expected)
            #expect(Set(results.map(\.key)).count == expected, "one result per event and device")
            #expect(results.allSatisfy { $0.status == "delivered" })

            let requests = testbed.production.receivedRequests()
            #expect(requests.count == expected, "every notification sent once")
            #expect(testbed.production.repeatedAPNSIDCount == 0)
            func keyIDs(_ phase: String) -> Set<String?> {
                Set(requests.filter { String(decoding: $0.payload, as: UTF8.self).contains("Order \(phase)-") }.map(\.providerKeyID))
            }
            #expect(keyIDs(phases[1]) == [secondKey.keyID])
            #expect(keyIDs(phases[2]) == [secondKey.keyID], "the broken file changed nothing")
            #expect(keyIDs(phases[3]) == [firstKey.keyID])

            herald.send(SIGTERM)
            #expect(try await herald.waitForExit(timeout: .seconds(30)) == 0)
        }
    }

    /// A Firebase key rotated while Android devices are pushed: the credentials file's FCM entry
    /// names a new key file of the same service account and Herald gets SIGHUP. The messages
    /// after the reload go out with an access token signed by the new key, and every
    /// notification is delivered once.
    @Test func aRotatedFirebaseKeyTakesEffectOnSIGHUPWhileAndroidDevicesArePushed() async throws {
        let testbed = try HeraldTestbed(fcmRotatedKey: true)
        let file = testbed.directory.appendingPathComponent("credentials.json")
        func writeCredentials(fcmKeyFile: String) throws {
            let key = testbed.key
            try Data(
                #"""
                [{"topics": ["\#(testbed.bundleID)"], "key_path": "\#(key.path)", "key_id": "\#(key.keyID)", "team_id": "\#(key.teamID)"},
                 {"platform": "fcm", "packages": ["\#(testbed.fcmPackage)"], "service_account_path": "\#(fcmKeyFile)"}]
                """#.utf8
            ).write(to: file, options: .atomic)
        }
        let users = (0..<20).map { "u-\($0)" }
        let pixels = users.map { AndroidDeliveryIntegrationTests.pixel($0) }
        let eventsPerPhase = 8

        try await testbed.withMocks {
            try writeCredentials(fcmKeyFile: try await testbed.writeFCMServiceAccount(named: "firebase-old.json", keyID: "old-key"))
            var environment = try await testbed.heraldEnvironment(group: "herald-\(UUID().uuidString)")
            for key in ["HERALD_APNS_KEY_PATH", "HERALD_APNS_KEY_ID", "HERALD_APNS_TEAM_ID", "HERALD_FCM_SERVICE_ACCOUNT_PATH"] { environment[key] = nil }
            environment["HERALD_CREDENTIALS_FILE"] = file.path
            let herald = try await testbed.startHerald(environment)
            for (user, pixel) in zip(users, pixels) { try await testbed.registerAndroid(user: user, token: pixel, at: "2026-11-21T10:00:00Z") }
            try await testbed.waitForActiveDevices(users: users, count: pixels.count)
            let log = HeraldLog(path: herald.logPath)

            for index in 0..<eventsPerPhase { try await testbed.publishMixedEvent(id: "before-\(index)", users: users) }
            // Rotated while the first phase is being pushed.
            try await Task.sleep(for: .milliseconds(200))
            let newKeyFile = try await testbed.writeFCMServiceAccount(named: "firebase-new.json", key: HeraldTestbed.fcmRotatedKey, keyID: "new-key")
            try writeCredentials(fcmKeyFile: newKeyFile)
            herald.send(SIGHUP)
            try await log.waitFor("credentials file applied", count: 1)
            let perPhase = eventsPerPhase * pixels.count
            // The first phase is delivered: whatever is delivered from now on is the second's.
            let clock = ContinuousClock()
            let firstPhaseDeadline = clock.now + .seconds(120)
            while testbed.fcm.totalDelivered < perPhase, clock.now < firstPhaseDeadline { try await Task.sleep(for: .milliseconds(50)) }
            #expect(testbed.fcm.totalDelivered == perPhase)
            let newKeyBefore = testbed.fcm.deliveredCount(keyID: "new-key")
            for index in 0..<eventsPerPhase { try await testbed.publishMixedEvent(id: "after-\(index)", users: users) }
            let reader = try TopicReader(topics: [testbed.topics.results])
            var records = try await reader.read(timeout: .seconds(120)) { $0.count >= 2 * perPhase }
            // Anything beyond the expected records would show up within a short grace period.
            records += try await reader.read(timeout: .seconds(2)) { _ in false }
            let results = records.compactMap(ResultRecord.init)
            #expect(results.count == 2 * perPhase)
            #expect(Set(results.map(\.key)).count == 2 * perPhase, "one result per event and device")
            #expect(results.allSatisfy { $0.status == "delivered" })
            #expect(pixels.allSatisfy { testbed.fcm.deliveredCount(token: $0) == 2 * eventsPerPhase }, "every notification sent once")
            #expect(testbed.fcm.deliveredCount(keyID: "old-key") + testbed.fcm.deliveredCount(keyID: "new-key") == 2 * perPhase)
            #expect(testbed.fcm.deliveredCount(keyID: "new-key") - newKeyBefore == perPhase, "the second phase went with the new key's token")
            herald.send(SIGTERM)
            #expect(try await herald.waitForExit(timeout: .seconds(30)) == 0)
        }
    }
}

extension MockAPNSServer.ReceivedRequest {
    /// The `kid` in the JWT header of the request's `authorization` (nil without one).
    var providerKeyID: String? {
        guard let bearer = header("authorization") else { return nil }
        let header = bearer.split(separator: " ").last?.split(separator: ".").first.map(String.init) ?? ""
        var base64 = header.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        let json = Data(base64Encoded: base64).flatMap { try? JSONSerialization.jsonObject(with: $0) as? [String: Any] }
        return json?["kid"] as? String
    }
}

/// Herald's log file, read as the process writes it.
struct HeraldLog {
    let path: String

    /// Waits (up to 30 s) until `text` occurs at least `count` times.
    func waitFor(_ text: String, count: Int) async throws {
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline {
            let contents = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
            if contents.components(separatedBy: text).count - 1 >= count { return }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw TestFailure("\"\(text)\" was not logged \(count) times within 30 s")
    }
}

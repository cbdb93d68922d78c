import JSONCore
import PushCore
import FCMCore
import Testing

/// An event's `fcm` part as JSON, validated as the pipeline will at intake.
func part(
    _ message: String,
    package: String = "com.example.shop",
    priority: Int? = 10,
    expiration: Int64? = nil,
    collapseID: String? = nil,
    now: Int64 = Answers.now
) throws(InputRejection) -> FCMEventPart {
    let json = #"{"package":"\#(package)","message":\#(message)}"#
    return try FCMEventPart(json: Array(json.utf8), priority: priority, expiration: expiration, collapseID: collapseID, nowMilliseconds: now)
}

func rejection(_ message: String, priority: Int = 10, expiration: Int64? = nil) -> InputRejection? {
    do {
        _ = try part(message, priority: priority, expiration: expiration)
        return nil
    } catch {
        return error
    }
}

func text(_ bytes: [UInt8]) -> String { String(decoding: bytes, as: UTF8.self) }

@Suite("The FCM message: validation at intake")
struct ValidationTests {
    @Test func aTypicalMessageIsAccepted() throws {
        let event = try part(#"{"notification":{"title":"Shipped","body":"On its way"},"data":{"order":"42"}}"#)
        #expect(event.package == "com.example.shop")
    }

    @Test(arguments: [
        #"{"data":{"count":1}}"#, #"{"data":{"flag":true}}"#, #"{"data":{"n":null}}"#, #"{"data":{"o":{"a":"b"}}}"#,
        #"{"android":{"data":{"count":2}}}"#,
    ])
    func dataValuesMustBeStrings(message: String) {
        #expect(rejection(message)?.code == .schemaViolation)
    }

    @Test(arguments: ["from", "message_type", "google.sent_time", "gcm.notification.title"])
    func reservedDataKeysAreRefused(key: String) {
        let refused = rejection(#"{"data":{"\#(key)":"x"}}"#)
        #expect(refused?.code == .schemaViolation)
        #expect(refused?.detail.contains("reserved") == true)
        #expect(rejection(#"{"android":{"data":{"\#(key)":"x"}}}"#)?.code == .schemaViolation)
    }

    @Test func keysThatOnlyLookReservedAreFine() throws {
        _ = try part(#"{"data":{"fromage":"brie","google":"x","gcm.other":"y","message_types":"z"}}"#)
    }

    @Test(arguments: ["token", "topic", "condition", "fid"])
    func targetsAreHeraldsToSet(member: String) {
        let refused = rejection(#"{"\#(member)":"abc"}"#)
        #expect(refused?.code == .schemaViolation)
        #expect(refused?.detail.contains("fcm.message.\(member)") == true)
    }

    /// Issue 49, finding 6: a field FCM's v1 Message does not have is refused at the intake
    /// (one dead letter), not by FCM once per device (a 400 each). FCM reads JSON field names
    /// in snake_case and in lowerCamelCase (proto3's JSON mapping).
    @Test(arguments: [
        #"{"notification":{"title":"a","subtitle":"b"}}"#, #"{"android":{"priorty":"high"}}"#,
        #"{"android":{"notification":{"title":"a","colour":"red"}}}"#, #"{"fcm_options":{"label":"x"}}"#,
        #"{"android":{"fcm_options":{"analytics":"x"}}}"#, #"{"apns":{"header":{}}}"#, #"{"webpush":{"notification":{},"link":"x"}}"#,
    ])
    func fieldsTheV1MessageDoesNotHaveAreRefused(message: String) {
        let refused = rejection(message)
        #expect(refused?.code == .schemaViolation)
        #expect(refused?.detail.contains("not a field") == true, "\(refused?.detail ?? "accepted")")
    }

    @Test func everyV1FieldIsAcceptedInEitherSpelling() throws {
        _ = try part(
            #"{"notification":{"title":"a","body":"b","image":"https://x/i.png"},"fcm_options":{"analytics_label":"l"},"#
                + #""android":{"collapse_key":"c","priority":"high","ttl":"60s","restricted_package_name":"p","direct_boot_ok":true,"#
                + #""fcm_options":{"analyticsLabel":"l"},"notification":{"title":"a","clickAction":"OPEN","channel_id":"ch","#
                + #""notification_priority":"PRIORITY_HIGH","visibility":"PUBLIC","notificationCount":3,"sticky":false}}}"#)
    }

    /// Issue 49, finding 9: an FCM token of an iOS or web app takes the v1 Message's `apns` or
    /// `webpush` block; both are validated as FCM defines them.
    @Test func apnsAndWebpushBlocksForFCMTokensOfOtherPlatforms() throws {
        _ = try part(
            #"{"notification":{"title":"a"},"apns":{"headers":{"apns-priority":"10"},"payload":{"aps":{"badge":1}},"#
                + #""fcm_options":{"image":"https://x/i.png"}},"webpush":{"headers":{"TTL":"60"},"data":{"k":"v"},"#
                + #""notification":{"title":"a","requireInteraction":true},"fcm_options":{"link":"https://example.com/o/7"}}}"#)
        #expect(rejection(#"{"apns":{"headers":{"apns-priority":10}}}"#)?.code == .schemaViolation)
        #expect(rejection(#"{"apns":{"payload":"aps"}}"#)?.code == .schemaViolation)
        #expect(rejection(#"{"webpush":{"data":{"n":1}}}"#)?.code == .schemaViolation)
    }

    @Test func unsupportedMembersAndTypesAreRefused() {
        #expect(rejection(#"{"apns":[]}"#)?.code == .schemaViolation)
        #expect(rejection(#"{"notification":{"title":5}}"#)?.code == .schemaViolation)
        #expect(rejection(#"{"notification":"hi"}"#)?.code == .schemaViolation)
        #expect(rejection(#"{"android":[]}"#)?.code == .schemaViolation)
        #expect(rejection(#"{"fcm_options":"x"}"#)?.code == .schemaViolation)
        #expect(rejection(#""text""#)?.code == .schemaViolation)
        #expect(rejection(#"{"android":{"priority":"urgent"}}"#)?.code == .schemaViolation)
        #expect(rejection(#"{"android":{"collapse_key":1}}"#)?.code == .schemaViolation)
        #expect(rejection(#"{"android":{"direct_boot_ok":"yes"}}"#)?.code == .schemaViolation)
    }

    @Test func packageAndMessageAreRequired() {
        #expect(throws: InputRejection.self) {
            _ = try FCMEventPart(json: Array(#"{"message":{}}"#.utf8), priority: 10, expiration: nil, collapseID: nil, nowMilliseconds: 0)
        }
        #expect(throws: InputRejection.self) {
            _ = try FCMEventPart(json: Array(#"{"package":"a"}"#.utf8), priority: 10, expiration: nil, collapseID: nil, nowMilliseconds: 0)
        }
        #expect(throws: InputRejection.self) { _ = try part("{}", package: "has space") }
        #expect(throws: InputRejection.self) {
            _ = try FCMEventPart(json: Array("{not json".utf8), priority: 10, expiration: nil, collapseID: nil, nowMilliseconds: 0)
        }
    }

    @Test(arguments: ["0s", "3.5s", "2419200s", "2419200.000s", "10.123456789s", "86400s"])
    func validTTLs(ttl: String) {
        #expect(FCMMessageValidator.isValidTTL(ttl))
        #expect(rejection(#"{"android":{"ttl":"\#(ttl)"}}"#) == nil)
    }

    @Test(arguments: ["", "s", "5", "-1s", "1.s", ".5s", "3.5 s", "2419201s", "2419200.5s", "1.1234567890s", "1e3s", "10m"])
    func invalidTTLs(ttl: String) {
        #expect(!FCMMessageValidator.isValidTTL(ttl))
        #expect(rejection(#"{"android":{"ttl":"\#(ttl)"}}"#)?.code == .schemaViolation)
    }

    @Test func registrationTargets() throws {
        #expect(try FCMTarget(registration: "abc:DEF_1-2", kind: nil) == .token("abc:DEF_1-2"))
        #expect(try FCMTarget(registration: "cRmcXyz", kind: "fid") == .fid("cRmcXyz"))
        #expect(try FCMTarget(registration: "MixedCase", kind: "token").value == "MixedCase")
        #expect(throws: InputRejection(.invalidToken, "an FCM token must be 1..4096 bytes")) {
            _ = try FCMTarget(registration: "", kind: nil)
        }
        #expect(throws: InputRejection.self) { _ = try FCMTarget(registration: "a b", kind: nil) }
        #expect(throws: InputRejection.self) { _ = try FCMTarget(registration: "a\u{1}", kind: nil) }
        #expect(throws: InputRejection.self) { _ = try FCMTarget(registration: String(repeating: "a", count: 4097), kind: nil) }
        #expect(throws: InputRejection.self) { _ = try FCMTarget(registration: "abc", kind: "apns") }
        #expect(!FCMTarget.token("abcdefghijklmnop").redacted.contains("ijklmnop"))
    }
}

@Suite("The FCM message: Herald's mapping and the size limit")
struct MappingTests {
    @Test func priorityTenIsHighAndOthersNormal() throws {
        let target = FCMTarget.token("tok")
        let high = try part("{}", priority: 10).request(to: target).body(nowMilliseconds: Answers.now)
        #expect(text(high) == #"{"message":{"token":"tok","android":{"priority":"high"}}}"#)
        for priority in [1, 5] {
            let normal = try part("{}", priority: priority).request(to: target).body(nowMilliseconds: Answers.now)
            #expect(text(normal) == #"{"message":{"token":"tok","android":{"priority":"normal"}}}"#)
        }
    }

    /// Issue 49, finding 6: an event that names no priority sends a data-only message `normal`
    /// (Google's advice unless the app must wake), one with a notification `high`.
    @Test func withoutAPriorityADataOnlyMessageIsNormal() throws {
        let target = FCMTarget.token("tok")
        let dataOnly = try part(#"{"data":{"k":"v"}}"#, priority: nil).request(to: target).body(nowMilliseconds: Answers.now)
        #expect(text(dataOnly).contains(#""android":{"priority":"normal"}"#))
        for message in [#"{"notification":{"title":"t"}}"#, #"{"android":{"notification":{"title":"t"}}}"#] {
            let shown = try part(message, priority: nil).request(to: target).body(nowMilliseconds: Answers.now)
            #expect(text(shown).contains(#""priority":"high""#), "\(message)")
        }
        let asked = try part(#"{"data":{"k":"v"}}"#, priority: 10).request(to: target).body(nowMilliseconds: Answers.now)
        #expect(text(asked).contains(#""priority":"high""#), "the event's own priority stands")
    }

    @Test func ttlIsTheSecondsLeftAtEachAttempt() throws {
        let expiration = Answers.now / 1000 + 3600
        let request = try part(#"{"data":{"a":"b"}}"#, expiration: expiration, collapseID: "order-42").request(to: .fid("f1"))
        #expect(
            text(request.body(nowMilliseconds: Answers.now))
                == #"{"message":{"fid":"f1","data":{"a":"b"},"android":{"priority":"high","ttl":"3600s","collapse_key":"order-42"}}}"#
        )
        // 1.5 s later the ttl is 3598 whole seconds (rounded down, never past expiration).
        #expect(text(request.body(nowMilliseconds: Answers.now + 1500)).contains(#""ttl":"3598s""#))
        #expect(request.expiration == expiration)
    }

    @Test func ttlEdges() {
        #expect(FCMMessage.ttl(expiration: 0, nowMilliseconds: Answers.now) == "0s")
        #expect(FCMMessage.ttl(expiration: 1, nowMilliseconds: Answers.now) == "0s")
        #expect(FCMMessage.ttl(expiration: Answers.now / 1000 + 100 * 86_400, nowMilliseconds: Answers.now) == "2419200s")
        #expect(FCMMessage.ttl(expiration: .max, nowMilliseconds: Answers.now) == "2419200s")
    }

    @Test func theAppsOwnAndroidFieldsWin() throws {
        let message = #"{"android":{"priority":"normal","ttl":"60s","collapse_key":"mine","notification":{"tag":"t"}}}"#
        let request = try part(message, priority: 10, expiration: Answers.now / 1000 + 3600, collapseID: "ours").request(to: .token("t"))
        #expect(
            text(request.body(nowMilliseconds: Answers.now))
                == #"{"message":{"token":"t","android":{"priority":"normal","ttl":"60s","collapse_key":"mine","notification":{"tag":"t"}}}}"#
        )
        // Expiration still bounds the notification even though the app set its own ttl.
        #expect(request.expiration == Answers.now / 1000 + 3600)
    }

    @Test func numbersAndEscapesAreForwardedAsWritten() throws {
        let message = #"{"android":{"notification":{"notification_count":1.50,"title":"a\"b\u00e9"}}}"#
        let body = text(try part(message).request(to: .token("t")).body(nowMilliseconds: Answers.now))
        #expect(body.contains(#""notification_count":1.50"#))
        #expect(body.contains(#""title":"a\"bé""#))
    }

    @Test func validateOnlyIsAddedBesideTheMessage() throws {
        var request = try part("{}").request(to: .token("t"))
        request.validateOnly = true
        #expect(text(request.body(nowMilliseconds: 0)).hasSuffix(#"}},"validate_only":true}"#))
    }

    /// The limit is on the message as sent (Herald's android fields included, the per-device
    /// target not): exactly 4096 bytes pass, one more is `payload_too_large`.
    @Test func sizeLimitIsMeasuredOnTheMessageAsSent() throws {
        let overhead = #"{"data":{"k":""},"android":{"priority":"high","ttl":"3600s","collapse_key":"c"}}"#.utf8.count
        let exact = String(repeating: "x", count: FCMMessage.maximumSize - overhead)
        let expiration = Answers.now / 1000 + 3600
        let fits = try part(#"{"data":{"k":"\#(exact)"}}"#, expiration: expiration, collapseID: "c")
        #expect(fits.message.messageObject(target: nil, nowMilliseconds: Answers.now).serialized().count == 4096)
        do {
            _ = try part(#"{"data":{"k":"\#(exact)x"}}"#, expiration: expiration, collapseID: "c")
            Issue.record("4097 bytes were accepted")
        } catch {
            #expect(error.code == .payloadTooLarge)
            #expect(error.detail.contains("4097"))
        }
        // Without Herald's ttl and collapse key the same data fits with room to spare.
        _ = try part(#"{"data":{"k":"\#(exact)x"}}"#)
    }

    @Test func escapesCountAsSent() {
        // 1,000 quotes are 2,000 bytes once escaped, plus 1,100 more characters: over the limit.
        let quotes = String(repeating: #"\""#, count: 1000) + String(repeating: "y", count: 2100)
        #expect(rejection(#"{"data":{"k":"\#(quotes)"}}"#)?.code == .payloadTooLarge)
    }
}

@Suite("Service-account key files")
struct ServiceAccountTests {
    static let pem = "-----BEGIN PRIVATE KEY-----\nMIIsecret\n-----END PRIVATE KEY-----\n"

    @Test func parsesGooglesKeyFile() throws {
        let file = """
            {"type":"service_account","project_id":"demo-project","private_key_id":"abc123def456",
             "private_key":"-----BEGIN PRIVATE KEY-----\\nMIIsecret\\n-----END PRIVATE KEY-----\\n",
             "client_email":"herald@demo-project.iam.gserviceaccount.com","client_id":"1",
             "token_uri":"https://oauth2.googleapis.com/token"}
            """
        let account = try FCMServiceAccount(json: Array(file.utf8))
        #expect(account.projectID == "demo-project")
        #expect(account.privateKeyID == "abc123def456")
        #expect(account.privateKeyPEM == Self.pem)
        #expect(account.clientEmail == "herald@demo-project.iam.gserviceaccount.com")
        #expect(account.tokenURI == "https://oauth2.googleapis.com/token")
        #expect(!account.description.contains("MIIsecret"))
        #expect(!"\(account)".contains("PRIVATE KEY"))
        #expect(try FCMServiceAccount(json: account.json) == account)
    }

    @Test(arguments: [
        #"{"project_id":"p","private_key_id":"k","client_email":"e"}"#,
        #"{"project_id":"p","private_key_id":"k","private_key":"nope","client_email":"e"}"#,
        #"{"type":"authorized_user","project_id":"p","private_key_id":"k","private_key":"-----BEGIN","client_email":"e"}"#,
        #"{"project_id":"p/../x","private_key_id":"k","private_key":"-----BEGIN","client_email":"e"}"#,
        #"{"project_id":"p","private_key_id":"k","private_key":"-----BEGIN","client_email":"e","token_uri":"http://x"}"#,
        "[]", "not json",
    ])
    func refusesIncompleteOrWrongFiles(file: String) {
        #expect(throws: FCMServiceAccountError.self) { _ = try FCMServiceAccount(json: Array(file.utf8)) }
    }

    @Test func errorsNeverQuoteTheKey() {
        let file = #"{"project_id":"p","private_key_id":"k","private_key":"MIIsecret","client_email":"e"}"#
        do {
            _ = try FCMServiceAccount(json: Array(file.utf8))
            Issue.record("accepted a key that is not PEM")
        } catch {
            #expect(!error.description.contains("MIIsecret"))
        }
    }
}

import NIOCore
import Testing

@testable import APNSWire
@testable import HTTP2Transport

@Suite("Response body parsing")
struct ResponseBodyTests {
    private func parse(_ text: String) -> APNSResponseBody {
        APNSResponseBody(parsing: ByteBuffer(string: text))
    }

    @Test func reasonOnly() {
        #expect(parse(#"{"reason":"BadDeviceToken"}"#) == APNSResponseBody(reason: "BadDeviceToken"))
    }

    @Test func unregisteredWithTimestamp() {
        #expect(
            parse(#"{"reason":"Unregistered","timestamp":1700000000123}"#)
                == APNSResponseBody(reason: "Unregistered", timestampMilliseconds: 1_700_000_000_123)
        )
    }

    @Test func whitespaceOrderAndUnknownMembers() {
        let body = parse(
            """
             { "timestamp" : 42 , "extra": {"a":[1,2,{"b":null}],"c":"}"}, "flag": true,
               "reason" : "ExpiredToken" }
            """
        )
        #expect(body == APNSResponseBody(reason: "ExpiredToken", timestampMilliseconds: 42))
    }

    @Test func escapesAreDecoded() {
        #expect(parse(#"{"reason":"A\"B\\C\u00e9\ud83d\ude00"}"#).reason == "A\"B\\Cé😀")
    }

    @Test func fractionalTimestampIsTruncated() {
        #expect(parse(#"{"timestamp":12.9}"#).timestampMilliseconds == 12)
    }

    @Test(arguments: [
        "", "null", "[]", "{", #"{"reason":}"#, #"{"reason" "x"}"#, "not json", #"{"reason":"unterminated"#,
    ])
    func malformedBodiesYieldNoReason(_ text: String) {
        #expect(parse(text).reason == nil)
    }

    @Test func aBodyThatIsNotJSONYieldsNothingEvenWhereItStartedWell() {
        #expect(parse(#"{"reason":"Shutdown", oops}"#) == APNSResponseBody())
    }

    @Test func wrongTypesAreIgnored() {
        #expect(parse(#"{"reason":5,"timestamp":"soon"}"#) == APNSResponseBody())
    }

    @Test func overflowingTimestampIsRejected() {
        #expect(parse(#"{"timestamp":99999999999999999999999}"#).timestampMilliseconds == nil)
    }
}

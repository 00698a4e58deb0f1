import Foundation
import Testing

@testable import CloudKitWebServices

/// The courier address `tokens/create` answers is polled four times a second by `zonefeed
/// watch`, and its notifications are taken as deletions: only an `https://` address is, or an
/// `http://` one on this machine or on the baseURL's own host and port (a fake server).
@Suite struct CourierAddressTests {
    @Test func anHTTPSAddressOrOneOnThisMachineOrTheBaseURLsHostIsPolled() {
        let base = "http://fake.test:8080"
        #expect(CloudKitClient.isCourierAddress("https://webcourier.push.apple.com/aps/abc", baseURL: "https://api.apple-cloudkit.com"))
        #expect(CloudKitClient.isCourierAddress("http://127.0.0.1:9000/courier/abc", baseURL: "https://api.apple-cloudkit.com"))
        #expect(CloudKitClient.isCourierAddress("http://fake.test:8080/courier/abc", baseURL: base))
        #expect(!CloudKitClient.isCourierAddress("http://fake.test:9090/courier/abc", baseURL: base))
        #expect(!CloudKitClient.isCourierAddress("http://fake.test/courier/abc", baseURL: "https://fake.test"))
    }

    /// A local socket, plain HTTP into the network, a file, an address with credentials, no
    /// host: none is polled, and the error does not quote the address (it holds the push token).
    @Test(arguments: [
        "http+unix://%2Fvar%2Frun%2Fdocker.sock/courier/SECRET", "http://169.254.169.254/courier/SECRET", "file:///etc/SECRET",
        "https://user:SECRET@courier.test/x", "https:///SECRET", "SECRET",
    ])
    func anyOtherCourierAddressIsRefusedUnquoted(_ address: String) async throws {
        try await withServer { server, client in
            server.enqueue(.json(200, #"{"apnsToken":"SECRET-apns","webcourierURL":"\#(address)"}"#), .json(200, "{}"))
            let error = await #expect(throws: CloudKitError.self) { try await client.createAndRegisterPushToken() }
            #expect(error?.code == .malformedResponse)
            #expect(error.map { !"\($0)".contains("SECRET") } == true, "\(String(describing: error))")
            #expect(server.requests.count == 1, "the token is not registered")
        }
    }
}

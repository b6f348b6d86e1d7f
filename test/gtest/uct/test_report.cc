/*
 * The offload report (UCX_RC_TM_REPORT=y): what an interface prints when it
 * closes, checked against what the test made happen (receives posted,
 * messages sent, the device list's size), and the same counters and report
 * through UCX's VFS while the interface is open.
 */
#include "uct_fixture.h"

#include "../common/scoped_env.h"
#include "../common/stdout_capture.h"

#include <ucs/vfs/base/vfs_obj.h>

#include <cctype>
#include <cstring>
#include <regex>

using namespace rc_tm_test;

namespace {

class rc_tm_report : public uct_fixture {
protected:
    struct posted {
        std::unique_ptr<mapped_buffer> buf;
        tag_recv                       recv;
    };

    /* The receiver prints its report; the sender does not */
    void open_reporting(const config_t &md_config,
                        const config_t &receiver_config = {{"REPORT", "y"}})
    {
        open(md_config, {}, &receiver_config);
    }

    ucs_status_t post(posted &p, uint64_t tag)
    {
        p.buf.reset(new mapped_buffer(m_component, m_md, 256, 0));
        uct_iov_t iov = p.buf->iov(256);
        return uct_iface_tag_recv_zcopy(m_receiver.iface, tag, UINT64_MAX,
                                        &iov, 1, &p.recv.ctx);
    }

    static size_t pack(void *dest, void *arg)
    {
        memset(dest, *static_cast<char*>(arg), 16);
        return 16;
    }

    void send(uint64_t tag)
    {
        char fill = (char)tag;
        ssize_t packed;
        ASSERT_TRUE(wait_for([&] {
            packed = uct_ep_tag_eager_bcopy(m_sender.eps.at(0), tag, 0, pack,
                                            &fill, 0);
            return packed != UCS_ERR_NO_RESOURCE;
        }));
        ASSERT_EQ(16, packed);
    }

    /* Posts count receives, then sends their messages in posting order and
     * waits until every receive completed */
    void post_and_match(std::vector<posted> &recvs)
    {
        for (size_t i = 0; i < recvs.size(); ++i) {
            ASSERT_EQ(UCS_OK, post(recvs[i], 0x100 + i));
        }
        for (size_t i = 0; i < recvs.size(); ++i) {
            send(0x100 + i);
        }
        ASSERT_TRUE(wait_for([&] {
            for (posted &p : recvs) {
                if (p.recv.completed == 0) {
                    return false;
                }
            }
            return true;
        }));
        for (posted &p : recvs) {
            EXPECT_EQ(UCS_OK, p.recv.status);
        }
    }

    /* Closes the interfaces (which print their reports) and returns what
     * was printed meanwhile; the md stays until the test's buffers are
     * deregistered */
    std::string close_and_capture()
    {
        EXPECT_EQ(nullptr, getenv("UCX_LOG_FILE"))
                << "the report goes to UCX_LOG_FILE, not stdout";
        stdout_capture capture;
        EXPECT_TRUE(capture.ok());
        close_ifaces();
        return capture.text();
    }

    /* The number after prefix in text (prefix a regular expression) */
    static long number_after(const std::string &text, const std::string &prefix)
    {
        std::smatch m;
        if (!std::regex_search(text, m, std::regex(prefix + "([0-9]+)"))) {
            ADD_FAILURE() << "no '" << prefix << "' in:\n" << text;
            return -1;
        }
        return std::stol(m[1]);
    }

    static size_t count(const std::string &text, const std::string &part)
    {
        size_t n = 0;
        for (size_t pos = text.find(part); pos != std::string::npos;
             pos = text.find(part, pos + 1)) {
            ++n;
        }
        return n;
    }

    static bool has(const std::string &text, const std::string &part)
    {
        return text.find(part) != std::string::npos;
    }

    std::string iface_vfs_path()
    {
        char path[128];
        snprintf(path, sizeof(path), "/uct/worker/%p/iface/%p",
                 (void*)m_receiver.worker, (void*)m_receiver.iface);
        return path;
    }
};

} // namespace

/* A device list of 4 and 40 receives posted before any message: 36 wait in
 * software, all at once, and the advice says the list was too short */
TEST_F(rc_tm_report, full_device_list_advises_a_longer_list)
{
    open_reporting({{"LIST_SIZE", "4"}});
    std::vector<posted> recvs(40);
    post_and_match(recvs);

    std::string report = close_and_capture();
    EXPECT_EQ(1u, count(report, "rc_tm offload report, soft:1"))
            << "the receiver's report alone:\n" << report;
    EXPECT_TRUE(has(report, "receives: 40 given to rc_tm: 4 to the device, "
                            "36 to software while its list was full "
                            "(peak 36)")) << report;
    EXPECT_TRUE(has(report, "advice: 90 % of receives stayed in software "
                            "because the device list (4) was full: raise "
                            "UCX_RC_TM_LIST_SIZE (the software list held up "
                            "to 36 more)")) << report;
    /* every message found its receive: the device or rc_tm's list */
    long device = number_after(report, "messages: 40 tagged; the device "
                                       "matched ");
    long sw     = number_after(report, "rc_tm's software list ");
    EXPECT_EQ(40, device + sw) << report;
    EXPECT_GE(device, 4) << report;
    EXPECT_TRUE(has(report, "; 0 unexpected")) << report;
}

/* Both lists full: receives are refused, and the advice names the software
 * list's setting; the canceled ones are counted */
TEST_F(rc_tm_report, refused_receives_advise_a_longer_software_list)
{
    open_reporting({{"LIST_SIZE", "2"}},
                   {{"REPORT", "y"}, {"TM_SW_LIST_SIZE", "3"}});
    std::vector<posted> recvs(8);
    for (size_t i = 0; i < recvs.size(); ++i) {
        EXPECT_EQ((i < 5) ? UCS_OK : UCS_ERR_EXCEEDS_LIMIT,
                  post(recvs[i], 0x200 + i)) << i;
    }
    for (size_t i = 0; i < 5; ++i) {
        EXPECT_EQ(UCS_OK, uct_iface_tag_recv_cancel(m_receiver.iface,
                                                    &recvs[i].recv.ctx, 1));
    }

    std::string report = close_and_capture();
    EXPECT_TRUE(has(report, "receives: 5 given to rc_tm: 2 to the device, 3 "
                            "to software while its list was full (peak 3); "
                            "0 moved to the device, 3 refused, 5 canceled"))
            << report;
    EXPECT_TRUE(has(report, "advice: 3 receives were refused, the device list "
                            "(2) and the software list (3) full, and matched "
                            "by UCP: raise UCX_RC_TM_TM_SW_LIST_SIZE"))
            << report;
}

/* Every message matched by the device: no advice */
TEST_F(rc_tm_report, all_matched_by_the_device_needs_no_advice)
{
    open_reporting({});
    std::vector<posted> recvs(10);
    post_and_match(recvs);

    std::string report = close_and_capture();
    EXPECT_TRUE(has(report, "messages: 10 tagged; the device matched 10 "
                            "(eager 10, rendezvous 0, UCP rendezvous requests "
                            "0), rc_tm's software list 0; 0 unexpected"))
            << report;
    EXPECT_TRUE(has(report, "receives: 10 given to rc_tm: 10 to the device, "
                            "0 to software")) << report;
    EXPECT_TRUE(has(report, "advice: none, the device matched 100 % of the "
                            "tagged messages")) << report;
}

/* No receive posted: every message is the user's to match, and the advice
 * names UCP's threshold as UCP reads it (here from the environment) */
TEST_F(rc_tm_report, messages_without_receives_name_the_threshold)
{
    scoped_env thresh("UCX_TM_THRESH", "4k");
    open_reporting({});
    for (uint64_t tag = 0; tag < 20; ++tag) {
        send(0x300 + tag);
    }
    ASSERT_TRUE(wait_for([&] { return m_receiver.unexpected.size() == 20; }));

    std::string report = close_and_capture();
    EXPECT_TRUE(has(report, "20 unexpected, matched by UCP (eager 20, "
                            "rendezvous 0, requests 0)")) << report;
    EXPECT_TRUE(has(report, "advice: no receive reached rc_tm, UCP matched "
                            "all 20 messages: messages below UCX_TM_THRESH "
                            "(4 KiB) are matched by UCP, not the device"))
            << report;
}

TEST_F(rc_tm_report, an_idle_interface_says_so)
{
    open_reporting({});
    std::string report = close_and_capture();
    EXPECT_TRUE(has(report, "rc_tm offload report, soft:1")) << report;
    EXPECT_TRUE(has(report, "no tagged message arrived and no receive was "
                            "given")) << report;
}

/* Off (the default): nothing printed */
TEST_F(rc_tm_report, off_prints_nothing)
{
    open_reporting({{"LIST_SIZE", "4"}}, {});
    std::vector<posted> recvs(10);
    post_and_match(recvs);

    std::string printed = close_and_capture();
    EXPECT_FALSE(has(printed, "rc_tm offload report")) << printed;
}

/* A running interface's counters and report, as UCX's VFS (ucx_vfs) shows
 * them, whether the report is on or not */
TEST_F(rc_tm_report, vfs_shows_counters_and_report)
{
    open({{"LIST_SIZE", "2"}});
    std::vector<posted> recvs(3);
    post_and_match(recvs);
    send(0x999);
    ASSERT_TRUE(wait_for([&] { return m_receiver.unexpected.size() == 1; }));

    /* Listing a directory refreshes it, as the VFS daemon does */
    std::vector<std::string> files;
    std::string dir = iface_vfs_path() + "/rc_tm/counters";
    ASSERT_EQ(UCS_OK, ucs_vfs_path_list_dir(iface_vfs_path().c_str(),
                                            [](const char *, void *) {},
                                            nullptr));
    ASSERT_EQ(UCS_OK, ucs_vfs_path_list_dir(
                      dir.c_str(),
                      [](const char *name, void *arg) {
                          static_cast<std::vector<std::string>*>(arg)
                                  ->push_back(name);
                      }, &files));
    EXPECT_EQ((size_t)COUNTER_LAST, files.size());

    auto read = [](const std::string &path) {
        ucs_string_buffer_t strb;
        ucs_string_buffer_init(&strb);
        EXPECT_EQ(UCS_OK, ucs_vfs_path_read_file(path.c_str(), &strb))
                << path;
        std::string text = ucs_string_buffer_cstr(&strb);
        ucs_string_buffer_cleanup(&strb);
        return text;
    };

    std::vector<uint64_t> c = counters(m_receiver);
    EXPECT_EQ("2\n", read(dir + "/post_device"));
    EXPECT_EQ("1\n", read(dir + "/post_sw"));
    EXPECT_EQ("1\n", read(dir + "/rx_eager_unexp"));
    EXPECT_EQ(std::to_string(c[RX_EXP]) + "\n", read(dir + "/rx_exp"));
    EXPECT_EQ(std::to_string(c[RX_SW_MATCH]) + "\n",
              read(dir + "/rx_sw_match"));
    EXPECT_EQ(3u, c[RX_EXP] + c[RX_SW_MATCH]);
    EXPECT_EQ("1\n", read(iface_vfs_path() + "/rc_tm/sw_list_peak"));

    std::string report = read(iface_vfs_path() + "/rc_tm/report");
    EXPECT_TRUE(has(report, "messages: 4 tagged")) << report;
    EXPECT_TRUE(has(report, "receives: 3 given to rc_tm: 2 to the device, 1 "
                            "to software")) << report;
}

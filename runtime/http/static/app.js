// The journal web UI: plain DOM, no framework, no build step, nothing from the network but
// this server. This module is the router: each page is a module of pages/, and what they
// share (the DOM built from hostile journal contents as text only, formats, the API with the
// token) is common.js.

import { NAVIGATED, leavePage } from "./common.js";
import { invocationPage } from "./pages/invocation.js";
import { keyPage } from "./pages/key.js";
import { listPage } from "./pages/list.js";
import { schedulesPage } from "./pages/schedules.js";

function route() {
  leavePage();
  const path = location.pathname;
  if (path.startsWith("/i/")) return invocationPage(decodeURIComponent(path.slice(3)));
  if (path.startsWith("/k/")) return keyPage(decodeURIComponent(path.slice(3)));
  if (path === "/s") return schedulesPage();
  return listPage();
}

window.addEventListener("popstate", route);
window.addEventListener(NAVIGATED, route);
route();
